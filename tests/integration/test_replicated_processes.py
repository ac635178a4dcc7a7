"""Ordered data parallelism across worker processes (C-Stream §4.2): replicas in different processes,
outputs equal a sequential run in order; termination, shutdown and failures stay clean."""

from __future__ import annotations

import os
import signal
import time

import pytest

import elastream as es
from flow_deadline import run_with_deadline
from elastream.processes import WorkerProcessError

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

N = 20_000


def pipeline(build, n: int = N) -> es.Flow:
    flow = es.Flow("replicated")
    s = flow.source(es.ops.FromIterable([(i % 101, i) for i in range(n)]), name="src")
    build(s.map(lambda e: (e[0], e[1] + 1), name="pre")).sink(es.ops.Collect(), name="out")
    return flow


STATELESS = {
    "selectivity 0": lambda s: s.filter(lambda e: e[1] < 0, name="x"),
    "selectivity 1": lambda s: s.map(lambda e: (e[0], e[1] * 7 % 1000), name="x"),
    "selectivity >1": lambda s: s.flat_map(lambda e: [e] * (e[1] % 4), name="x"),
}


def running_count(s):
    return s.key_by(lambda e: e[0], partitions=16).process(lambda n, e: (n + 1, [(e[0], n + 1)] * (e[1] % 3)),
                                                            state=int, name="x")


def run_replicated(flow: es.Flow, threads: int = 1, **kw) -> es.RunResult:
    """``x`` as two replicas, x#0 on process 0 (its home) and x#1 on process 1."""
    return run_with_deadline(flow, timeout=60, processes=2, threads=threads, replicas={"x": 2},
                             placement={"src": 0, "pre": 0, "x": 0, "out": 1}, **kw)


@pytest.mark.parametrize("case", sorted(STATELESS))
def test_stateless_replicas_over_two_processes_keep_sequential_order(case):
    expected = run_with_deadline(pipeline(STATELESS[case]), threads=1).outputs["out"]
    result = run_replicated(pipeline(STATELESS[case]), max_queue_size=16, batch_size=64)
    assert result.outputs["out"] == expected
    assert {"x#0", "x#1", "x#split", "x#merge"} <= set(result.stats.operators)
    assert all(result.stats.operators[f"x#{r}"].tuples_in > 0 for r in (0, 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_partitioned_replicas_over_two_processes_equal_a_sequential_fold(threads):
    expected = run_with_deadline(pipeline(running_count), threads=1).outputs["out"]
    result = run_replicated(pipeline(running_count), threads=threads)
    assert result.outputs["out"] == expected
    # State survives the whole run: the running count per key equals a plain sequential fold.
    counts: dict[int, int] = {}
    fold = []
    for i in range(N):
        k = i % 101
        counts[k] = counts.get(k, 0) + 1
        fold += [(k, counts[k])] * ((i + 1) % 3)
    assert result.outputs["out"] == fold


def test_killed_replica_process_fails_the_run_within_five_seconds_naming_it():
    flow = es.Flow("endless")
    (flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x")
         .sink(es.ops.Callback(lambda x: None), name="out"))
    handle = es.Runner(processes=2, placement={"src": 0, "x": 0, "out": 0}, replicas={"x": 2}).start(flow)
    assert handle.assignment["x#1"] == 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (handle.stats().operators.get("x#1") or None):
        time.sleep(0.05)
    os.kill(handle.worker_pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerProcessError) as info:
        handle.wait(timeout=10)
    assert time.monotonic() - t0 < 5.0
    assert info.value.index == 1 and info.value.operators == ["x#1"]


def test_shutdown_of_an_endless_replicated_flow_is_clean():
    flow = es.Flow("endless")
    (flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x")
         .sink(es.ops.Callback(lambda x: None), name="out"))
    handle = es.Runner(processes=2, placement={"src": 0, "x": 0, "out": 1}, replicas={"x": 2}).start(flow)
    time.sleep(0.5)
    t0 = time.monotonic()
    result = handle.shutdown(timeout=10)
    assert time.monotonic() - t0 < 5.0
    assert result.shutdown


def test_operator_failure_in_a_replica_names_the_operator_and_the_replica():
    def boom(e):
        if e[1] == 15_000:
            raise ValueError("bad tuple 15000")
        return e

    flow = pipeline(lambda s: s.map(boom, name="x"))
    placement = {"src": 0, "pre": 0, "x": 0, "out": 0}
    with pytest.raises(es.OperatorError, match="bad tuple 15000") as info:
        es.Runner(processes=2, placement=placement, replicas={"x": 2}).run(flow, timeout=60)
    assert info.value.operator == "x"
    assert "in replica 'x#0'" in info.value.details or "in replica 'x#1'" in info.value.details


def test_automatic_rule_from_measured_costs_replicates_the_heavy_operator():
    def build() -> es.Flow:
        flow = es.Flow("auto")
        (flow.source(range(2_000), name="src").then(es.ops.Busy(cost_us=200.0), name="heavy")
             .map(lambda x: x * 2, name="light").sink(es.ops.Collect(), name="out"))
        return flow

    first = run_with_deadline(build(), threads=1)
    flow = build()
    handle = es.Runner(processes=2, placement=first.stats, replicas="auto").start(flow)
    assert {handle.assignment["heavy#0"], handle.assignment["heavy#1"]} == {0, 1}
    assert handle.wait(60).outputs["out"] == first.outputs["out"]


@pytest.mark.parametrize("window_ms", [None, 20.0])
def test_the_replica_window_setting_reaches_the_split_and_keeps_the_order(window_ms):
    flow = pipeline(running_count)
    expected = es.Runner().run(pipeline(running_count), timeout=60).outputs["out"]
    placement = {"src": 0, "pre": 0, "x": 0, "out": 0}
    handle = es.Runner(processes=2, placement=placement, replicas={"x": 2},
                       ordering=es.OrderingConfig(replica_window_ms=window_ms)).start(flow)
    link = handle.run_flow["x#split"].operator.link
    assert link.scale == pytest.approx(1.0 if window_ms is None else window_ms / 200.0)
    assert handle.wait(60).outputs["out"] == expected
