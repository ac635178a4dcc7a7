"""Held workers start late or never (issue 20, processes.held_start).

A plain ``Runner()`` holds a worker process per further core, but starts it only when the
run outlives ``HELD_START_S`` or a decision adds a replica: a short flow ends without ever
starting one (part 0's receivers end on the streams closed in the workers' name), a longer
one has them up before DS2's first decision, and a decision starts them at once. The fork helper
they start from boots as soon as the run starts.
"""

from __future__ import annotations

import os
import threading

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.processes import forkserver, stop_fork_server
from elastream.processes.supervisor import ProcessRunHandle
from elastream.runtime.decisions import SetReplicas

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]


def keyed_flow(source) -> es.Flow:
    flow = es.Flow("held-start")
    (flow.source(es.ops.FromIterable(source), name="src")
         .key_by(lambda i: i % 7)
         .process(lambda count, i: (count + 1, [(i % 7, count + 1)]), state=int, name="count",
                  on_end=lambda key, count: [("end", key, count)])
         .sink(es.ops.Collect(), name="out"))
    return flow


def gated(n: int, gate: threading.Event, after: int):
    for i in range(n):
        if i == after:
            gate.wait(30.0)
        yield i


def expected(n: int) -> list:
    return es.Runner(threads=1, elastic=False).run(keyed_flow(range(n))).outputs["out"]


def test_a_short_flow_ends_without_starting_its_held_workers():
    handle = es.Runner().start(keyed_flow(range(300)))
    assert isinstance(handle.inner, ProcessRunHandle)
    result = handle.wait(60)
    assert result.outputs["out"] == expected(300)
    assert handle.inner.worker_pids[1:] == []                # never started
    assert not handle.inner._held.waiting


def test_without_a_decision_the_held_workers_never_start():
    gate = threading.Event()
    handle = es.Runner(elastic=es.Elastic(controller="trend")).start(keyed_flow(gated(2_000, gate, after=100)))
    try:
        threading.Event().wait(0.3)
        assert handle.inner.worker_pids[1:] == [] and handle.inner._held.waiting
    finally:
        gate.set()
    assert handle.wait(60).outputs["out"] == expected(2_000)
    assert handle.inner.worker_pids[1:] == []


def test_rings_of_held_workers_get_pages_only_when_the_workers_start(wait_until):
    # Most runs never start them: reserving and mapping 4 MB per ring cost every plain Runner() ~3 ms.
    gate = threading.Event()
    handle = es.Runner(elastic=es.Elastic(controller="trend")).start(keyed_flow(gated(3_000, gate, after=200)))
    try:
        rings = list(handle.inner._rings)
        assert rings and handle.inner._held.waiting
        assert all(_page_bytes(r) < r.capacity // 2 for r in rings)
        applied = handle.submit([SetReplicas("count", 2, reason="test")])
        assert applied[0].ok, applied[0].why
        wait_until(lambda: len(handle.inner.worker_pids) == handle.inner.processes, what="the held workers' start")
        assert all(_page_bytes(r) >= r.capacity for r in rings)
    finally:
        gate.set()
    assert handle.wait(60).outputs["out"] == expected(3_000)


def _page_bytes(ring) -> int:
    return os.stat(f"/dev/shm/{ring.name}").st_blocks * 512


def test_the_fork_helper_boots_while_the_held_workers_wait():
    # Its first start is ~0.35 s of imports: a decision that had to wait for it held the stream that long.
    stop_fork_server()
    gate = threading.Event()
    handle = es.Runner(elastic=es.Elastic(controller="trend")).start(keyed_flow(gated(2_000, gate, after=100)))
    try:
        for _ in range(200):
            if forkserver.fork_server_running():
                break
            threading.Event().wait(0.05)
        assert forkserver.fork_server_running()
        assert handle.inner.worker_pids[1:] == [] and handle.inner._held.waiting
    finally:
        gate.set()
    assert handle.wait(60).outputs["out"] == expected(2_000)


def test_a_decision_starts_the_held_workers_at_once_and_the_output_stays_sequential():
    gate = threading.Event()
    handle = es.Runner().start(keyed_flow(gated(3_000, gate, after=200)))
    try:
        applied = handle.submit([SetReplicas("count", 2, reason="test")])
        assert applied[0].ok, applied[0].why
    finally:
        gate.set()
    result = handle.wait(60)
    assert len(handle.inner.worker_pids) == handle.inner.processes
    assert result.outputs["out"] == expected(3_000)
    assert result.stats.operators["count#split"].tuples_in > 0



def test_the_end_without_held_workers_is_signalled_not_polled(monkeypatch):
    """Part 0's senders into the waiting workers wake the supervisor as they complete: with the
    supervisor's own looks pushed out of reach, a short flow still ends at once."""
    from elastream.processes import held_start, supervisor

    monkeypatch.setattr(held_start, "IDLE_CHECK_S", 3600.0)
    monkeypatch.setattr(supervisor, "WATCH_S", 3600.0)
    handle = es.Runner(elastic=es.Elastic(period_s=3600.0)).start(keyed_flow(range(300)))
    assert handle.wait(30).outputs["out"] == expected(300)
    assert handle.inner.worker_pids[1:] == []
