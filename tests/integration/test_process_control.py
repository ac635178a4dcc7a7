"""Decisions reach running worker processes over the control channel and come back with their real outcome.

A 2-process run: ``SetThreads`` for process 1 is applied by the child at its
control loop (its pool is checked there) and the parent's ``timeline`` records
the child's answer; the child's own statistics then show the new pool.
``SetReplicas`` / ``MoveKeyGroups`` travel to the process hosting the
operator's split and come back as not applied yet.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.processes.replicate import replicated_placement
from elastream.runtime.decisions import MoveKeyGroups, SetReplicas, SetThreads

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def endless(name: str = "endless") -> es.Flow:
    flow = es.Flow(name)
    (flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x")
         .sink(es.ops.Callback(lambda x: None), name="out"))
    return flow


def alive_threads(stats) -> int:
    return sum(1 for w in stats.workers if w.alive)


def test_threads_of_a_worker_process_change_while_it_runs(wait_until):
    handle = es.Runner(processes=2, threads=1, placement={"src": 0, "x": 1, "out": 1}).start(endless())
    try:
        wait_until(lambda: handle.part_stats()[1] is not None and handle.part_stats()[1].operators["out"].tuples_in,
                   timeout=30, what="tuples reaching process 1")
        applied = handle.submit([SetThreads(2, process=1, reason="test")])
        assert [(a.ok, a.why) for a in applied] == [(True, "")]
        child = handle.part_stats()[1]  # the child reports its statistics right before its answer
        assert child.threads == 2 and alive_threads(child) == 2
        assert alive_threads(handle.part_stats()[0]) == 1
        assert handle.timeline == applied

        assert handle.set_threads(3) == 3
        assert [(a.decision.process, a.ok) for a in handle.timeline[1:]] == [(0, True), (1, True)]
        assert handle.part_stats()[1].threads == 3
        wait_until(lambda: alive_threads(handle.part_stats()[0]) == 3, timeout=10, what="3 threads in process 0")
        wait_until(lambda: alive_threads(handle.part_stats()[1]) == 3, timeout=10, what="3 threads in process 1")
    finally:
        result = handle.shutdown(timeout=10)
    assert result.shutdown


def test_decisions_a_part_cannot_apply_come_back_with_the_reason(wait_until):
    handle = es.Runner(processes=2, placement={"src": 0, "x": 1, "out": 1}).start(endless())
    try:
        wait_until(lambda: handle.stats().operators.get("out"), timeout=30, what="process 1 reporting")
        applied = handle.submit([SetThreads(0, process=1), SetThreads(2, process=5), SetReplicas("x", 2)])
        assert [a.ok for a in applied] == [False, False, False]
        assert "at least one" in applied[0].why
        assert "no process 5" in applied[1].why
        assert "not replicated" in applied[2].why
    finally:
        handle.shutdown(timeout=10)
    assert handle.submit([SetThreads(2, process=1)])[0].why == "process 1 has ended"
    assert len(handle.timeline) == 4


def test_replica_decisions_travel_to_the_process_of_the_split(wait_until):
    flow = endless("replicated")
    placement = replicated_placement(flow, 2, {"x": 2}, placement={"src": 1, "x": 1, "out": 0})
    handle = es.Runner(processes=2, replicas={"x": 2}, placement=placement).start(flow)
    assert handle.assignment["x#split"] == 1  # the split sits with x's upstream operator
    try:
        wait_until(lambda: handle.stats().operators.get("x#0"), timeout=30, what="the replicas reporting")
        applied = handle.submit([SetReplicas("x", 1, reason="test"), MoveKeyGroups("x", (0, 1), target=1)])
    finally:
        handle.shutdown(timeout=10)
    assert [a.ok for a in applied] == [True, False]  # the split routes new batches to replica 0 only
    assert applied[1].why.startswith("MoveKeyGroups of 'x'") and "not applied while a flow runs" in applied[1].why


def test_period_listeners_get_the_parts_statistics_merged():
    flow = es.Flow("periods2")
    (flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x")
         .sink(es.ops.Callback(lambda x: None), name="out"))
    handle = es.Runner(processes=2, placement={"src": 0, "x": 1, "out": 1},
                       scheduling=es.SchedulingConfig(stats_period_ms=50)).start(flow)
    got = []
    enough = threading.Event()

    def listen(period):
        got.append(period)
        if sum(p.operators["out"].tuples_in for p in got if "out" in p.operators) > 0 and len(got) >= 3:
            enough.set()

    try:
        handle.add_period_listener(listen)
        assert enough.wait(60), "no periods with tuples from the worker process"
    finally:
        handle.shutdown()
    assert {"src", "x", "out"} <= set(got[-1].operators)          # both processes' operators, merged
    assert [p.start_s for p in got] == sorted(p.start_s for p in got)


def test_units_lowered_to_one_replica_each_keep_replicas_in_different_processes(wait_until):
    flow = es.Flow("two-units")
    src = flow.source(lambda: iter(int, 1), name="src")
    src.map(lambda x: x + 1, name="x").sink(es.ops.Callback(lambda x: None), name="out_x")
    src.map(lambda x: x + 2, name="y").sink(es.ops.Callback(lambda x: None), name="out_y")
    home = {name: 0 for name in ("src", "x", "y", "out_x", "out_y")}  # both units' first replicas in process 0
    placement = replicated_placement(flow, 2, {"x": 2, "y": 2}, placement=home)
    handle = es.Runner(processes=2, replicas={"x": 2, "y": 2}, placement=placement).start(flow)
    try:
        wait_until(lambda: handle.stats().operators.get("y#1"), timeout=30, what="the replicas reporting")
        applied = handle.submit([SetReplicas("x", 1, reason="test"), SetReplicas("y", 1, reason="test")])
        assert [a.ok for a in applied] == [True, True]
        kept = [handle.assignment[f"{a.decision.operator}#{(a.decision.replicas or (0,))[0]}"] for a in applied]
        assert sorted(kept) == [0, 1]  # one whole unit in each process, not both in the home process
        out = {name: handle.stats().operators[name].tuples_in for name in ("out_x", "out_y")}
        wait_until(lambda: all(handle.stats().operators[n].tuples_in > out[n] for n in out), timeout=30,
                   what="both units still flowing")
    finally:
        handle.shutdown(timeout=10)
