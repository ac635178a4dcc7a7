"""Plain ``Runner()`` holds worker processes ready and adds them while the flow runs (issue 20).

Everything runs in this process at first; each replication unit has a replica held in a
worker process, which takes work once a ``SetReplicas`` (DS2's, or the caller's) adds it.
The output stays exactly the sequential one, the statistics keep the user's operator names,
and a run whose units cannot go to a worker process still completes in one process.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.processes.supervisor import ProcessRunHandle
from elastream.runtime.decisions import SetReplicas
from elastream.runtime.engine import ThreadRunHandle

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]

N = 6_000


def gated(n: int, gate: threading.Event, after: int = 500):
    """``(key, i)`` tuples; after the first ``after`` the source waits for ``gate`` (the test's decision)."""
    for i in range(n):
        if i == after:
            gate.wait(30.0)
        yield (i % 31, i)


def keyed_flow(source) -> es.Flow:
    flow = es.Flow("held-keyed")
    (flow.source(es.ops.FromIterable(source), name="src")
         .key_by(lambda e: e[0])
         .process(lambda count, e: (count + 1, [(e[0], e[1], count + 1)]), state=int, name="x")
         .sink(es.ops.Collect(), name="out"))
    return flow


def chain_flow(source) -> es.Flow:
    flow = es.Flow("held-chain")
    (flow.source(es.ops.FromIterable(source), name="src")
         .map(lambda e: (e[0], e[1] * 3), name="a")
         .filter(lambda e: e[1] % 2 == 0, name="b")
         .sink(es.ops.Collect(), name="out"))
    return flow


def sequential(build) -> list:
    return es.Runner(processes=1, elastic=False).run(build(gated(N, _open()))).outputs["out"]


def _open() -> threading.Event:
    gate = threading.Event()
    gate.set()
    return gate


@pytest.mark.parametrize("build, unit", [(keyed_flow, "x"), (chain_flow, "a+b")])
def test_a_held_replica_takes_work_once_added_and_the_output_stays_sequential(build, unit):
    gate = threading.Event()
    handle = es.Runner().start(build(gated(N, gate)))
    try:
        assert isinstance(handle.inner, ProcessRunHandle)
        levels = handle.loop.levels
        assert levels.held and levels.replicas == {unit: 1} and levels.working_processes == 1
        applied = handle.submit([SetReplicas(unit, 2, reason="test")])
        assert applied[0].ok, applied[0].why
    finally:
        gate.set()
    result = handle.wait(60.0)
    assert result.outputs["out"] == sequential(build)
    raw = handle.inner.stats().operators
    assert raw[f"{unit}#1"].tuples_in > 0  # the held replica in the worker process took work
    if unit == "x":
        assert result.stats.operators["x"].tuples_in == N  # listed under the user's name, tuples counted
        assert "x#0" not in result.stats.operators


def test_replicas_given_back_hand_their_key_groups_home():
    gate = threading.Event()
    handle = es.Runner().start(keyed_flow(gated(N, gate, after=200)))
    try:
        assert handle.submit([SetReplicas("x", 2)])[0].ok
        assert handle.submit([SetReplicas("x", 1)])[0].ok
    finally:
        gate.set()
    result = handle.wait(60.0)
    assert result.outputs["out"] == sequential(keyed_flow)


class Locked(es.FunctionOperator):
    """A map holding a lock: it cannot be pickled, so it cannot go to a worker process."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def on_batch(self, items, port):
        with self.lock:
            return [(k, i + 1) for k, i in items]


def test_a_unit_that_cannot_go_to_a_worker_process_keeps_the_run_in_one_process():
    flow = es.Flow("unpicklable")
    flow.source(es.ops.FromIterable([(i % 5, i) for i in range(2_000)]), name="src") \
        .then(Locked(), name="locked").sink(es.ops.Collect(), name="out")
    handle = es.Runner().start(flow)
    result = handle.wait(60.0)
    assert isinstance(handle.inner, ThreadRunHandle)
    assert result.outputs["out"] == [(i % 5, i + 1) for i in range(2_000)]


def test_a_thread_count_given_keeps_the_run_in_one_process():
    handle = es.Runner(threads=2).start(keyed_flow(gated(N, _open())))
    result = handle.wait(60.0)
    assert isinstance(handle.inner, ThreadRunHandle)
    assert result.outputs["out"] == sequential(keyed_flow)
