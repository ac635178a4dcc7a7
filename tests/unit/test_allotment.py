"""Dynamic allotment (ordered-multicore §2.2–§5): several workers on one operator, output order kept."""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.runtime import allotment
from elastream.runtime.allotment import ParallelFunctionTask


class Concurrency:
    """Counts how many threads are inside a function at once (per key too)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.per_key: dict = {}
        self.key_overlaps = 0

    def enter(self, key=None) -> None:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            if key is not None:
                self.per_key[key] = self.per_key.get(key, 0) + 1
                if self.per_key[key] > 1:
                    self.key_overlaps += 1

    def leave(self, key=None) -> None:
        with self.lock:
            self.inside -= 1
            if key is not None:
                self.per_key[key] -= 1


def run(flow: es.Flow, **options) -> es.RunResult:
    return es.Runner(**options).run(flow, timeout=60)


def stateless_flow(n: int, gauge: Concurrency, pause: float = 0.0005) -> es.Flow:
    def slow_double(x):
        gauge.enter()
        time.sleep(pause)  # releases the GIL, so several workers really overlap
        gauge.leave()
        return 2 * x

    flow = es.Flow("stateless")
    flow.source(es.ops.FromIterable(range(n)), name="src").map(slow_double, name="double").collect(name="out")
    return flow


@pytest.mark.parametrize("reorder", ["nonblocking", "lock"])
def test_stateless_operator_runs_on_several_workers_and_keeps_order(reorder):
    gauge = Concurrency()
    result = run(stateless_flow(400, gauge), threads=4, batch_size=4, ordering=es.OrderingConfig(reorder=reorder))
    assert result.outputs["out"] == [2 * x for x in range(400)]
    assert gauge.peak >= 2, "no two workers ever ran the stateless operator at once"
    double = result.stats.operators["double"]
    assert double.peak_workers >= 2 and double.workers == 0 and double.max_workers > 4
    assert result.stats.operators["src"].peak_workers == 1 and result.stats.operators["src"].max_workers == 1


def test_one_worker_thread_runs_function_operators_without_allotment():
    gauge = Concurrency()
    flow = stateless_flow(50, gauge)
    handle = es.Runner(threads=1).start(flow)
    assert not any(isinstance(t, ParallelFunctionTask) for t in handle._tasks)
    assert handle.wait(30).outputs["out"] == [2 * x for x in range(50)]
    assert gauge.peak == 1


def keyed_flow(events: list[tuple[int, int]], gauge: Concurrency, partitions: int) -> es.Flow:
    def step(total, event):
        key, value = event
        gauge.enter(key)
        time.sleep(0.0002)
        gauge.leave(key)
        total += value
        return total, [(key, total)]

    flow = es.Flow("keyed")
    (flow.source(es.ops.FromIterable(events), name="src")
         .key_by(lambda e: e[0], partitions=partitions).process(step, state=int)
         .collect(name="out"))
    return flow


def sequential_running_sums(events: list[tuple[int, int]]) -> list[tuple[int, int]]:
    totals: dict[int, int] = {}
    out = []
    for key, value in events:
        totals[key] = totals.get(key, 0) + value
        out.append((key, totals[key]))
    return out


@pytest.mark.parametrize("partitioning", ["hybrid", "partitioned"])
def test_partitioned_operator_never_runs_one_key_on_two_workers_and_keeps_its_state(partitioning):
    events = [(i % 7, i) for i in range(700)]
    gauge = Concurrency()
    result = run(keyed_flow(events, gauge, partitions=4), threads=4, batch_size=8, ordering=es.OrderingConfig(partitioning=partitioning))
    assert result.outputs["out"] == sequential_running_sums(events)
    assert gauge.key_overlaps == 0
    assert gauge.peak >= 2, "no two partitions were ever processed at once"


def test_skewed_keys_still_finish_in_order():
    events = [(0 if i % 10 else i % 5, i) for i in range(1000)]   # 90% of the tuples on key 0
    gauge = Concurrency()
    result = run(keyed_flow(events, gauge, partitions=8), threads=3, batch_size=16)
    assert result.outputs["out"] == sequential_running_sums(events)
    assert gauge.key_overlaps == 0


def test_stateful_operator_never_gets_two_workers():
    gauge = Concurrency()

    def step(seen, x):
        gauge.enter()
        time.sleep(0.0002)
        gauge.leave()
        return seen + 1, [(x, seen + 1)]

    flow = es.Flow("stateful")
    flow.source(es.ops.FromIterable(range(300)), name="src").process(step, state=int, kind="stateful").collect(
        name="out")
    result = run(flow, threads=4, batch_size=4)
    assert result.outputs["out"] == [(x, x + 1) for x in range(300)]
    assert gauge.peak == 1


def test_refused_outputs_are_retried_when_the_window_is_tiny(monkeypatch):
    monkeypatch.setattr(allotment, "STATELESS_WINDOW", 1)
    monkeypatch.setattr(allotment, "PARTITIONED_BACKLOG", 1)
    gauge = Concurrency()
    events = [(i % 5, i) for i in range(400)]
    flow = keyed_flow(events, gauge, partitions=5)
    result = run(flow, threads=4, batch_size=2, max_queue_size=4)
    assert result.outputs["out"] == sequential_running_sums(events)
    result = run(stateless_flow(200, gauge), threads=4, batch_size=2, max_queue_size=4)
    assert result.outputs["out"] == [2 * x for x in range(200)]


def test_selectivity_zero_and_many_keeps_one_serial_per_input():
    flow = es.Flow("selectivity")
    (flow.source(es.ops.FromIterable(range(3000)), name="src")
         .filter(lambda x: x % 4 == 0)
         .flat_map(lambda x: [x] * (x % 3))
         .map(lambda x: -x)
         .collect(name="out"))
    expected = [-x for x in range(3000) if x % 4 == 0 for _ in range(x % 3)]
    for threads in (2, 5):
        assert run(flow, threads=threads, batch_size=3, max_queue_size=8).outputs["out"] == expected


def test_back_pressure_bounds_the_buffers_behind_a_slow_sink():
    def slow(x):
        time.sleep(0.0001)
        return x

    flow = es.Flow("pressure")
    flow.source(es.ops.FromIterable(range(2000)), name="src").map(lambda x: x + 1, name="inc").map(
        slow, name="slow").collect(name="out")
    result = run(flow, threads=4, batch_size=8, max_queue_size=16)
    assert result.outputs["out"] == [x + 1 for x in range(2000)]
    for port in result.stats.operators["slow"].inputs:
        assert port.max_size <= 16


def test_an_exception_in_a_shared_operator_stops_the_flow_with_its_name():
    def boom(x):
        if x == 777:
            raise ValueError("bad tuple 777")
        time.sleep(0.00005)
        return x

    flow = es.Flow("failing")
    flow.source(es.ops.FromIterable(range(5000)), name="src").map(boom, name="boom").collect(name="out")
    with pytest.raises(es.OperatorError) as info:
        run(flow, threads=4, batch_size=4)
    assert "boom" in str(info.value) and "bad tuple 777" in str(info.value)


def test_shutdown_while_several_workers_share_an_operator(wait_until):
    def slow(x):
        time.sleep(0.001)
        return x

    flow = es.Flow("endless")
    flow.source(es.ops.FromGenerator(lambda: iter(range(10**9))), name="src").map(slow, name="slow").collect(
        name="out")
    handle = es.Runner(threads=4, batch_size=4).start(flow)
    wait_until(lambda: handle.stats().operators["slow"].peak_workers >= 2 and handle.stats().operators["out"].tuples_in,
               timeout=30, what="several workers on the operator and tuples through it")
    result = handle.shutdown(timeout=10)
    assert result.shutdown
    out = result.outputs["out"]
    assert out == list(range(len(out)))          # whatever got through is a prefix, in order


@pytest.mark.parametrize("option, value", [("reorder", "fifo"), ("partitioning", "random")])
def test_unknown_scheme_names_fail_at_construction(option, value):
    with pytest.raises(ValueError, match=value):
        es.Runner(threads=2, ordering=es.OrderingConfig(**{option: value}))


def test_end_of_stream_flush_follows_the_keys_first_seen_input_order():
    def step(total, x):
        time.sleep(0.00005)
        return total + x, ()

    def flow() -> es.Flow:
        f = es.Flow("flush")
        (f.source(es.ops.FromIterable([(k * 37) % 101 for k in range(2000)]), name="src")
          .key_by(lambda x: x % 23, partitions=8)
          .process(lambda total, x: step(total, x), state=int, on_end=lambda key, total: [(key, total)])
          .collect(name="out"))
        return f

    sequential = run(flow(), threads=1).outputs["out"]
    assert run(flow(), threads=4, batch_size=16).outputs["out"] == sequential


def test_per_item_outputs_of_keyed_operators_match_their_batches():
    reduce = es.ops.KeyedReduce(lambda x: x % 3, lambda a, x: a + x)
    process = es.ops.KeyedProcess(lambda x: x % 3, lambda n, x: (n + 1, [n + 1] * (x % 2)), state=int)
    for op in (reduce, process):
        twin = type(op)(**{"key": op.key, **({"fn": op.fn} if op is reduce else {"step": op.step, "state": int})})
        op.open(None)
        twin.open(None)
        items = list(range(20))
        per_item = op.on_items(items, 0)
        assert len(per_item) == len(items)
        assert [y for ys in per_item for y in ys] == twin.on_batch(items, 0)


@pytest.mark.parametrize("partitioning, partitions", [("hybrid", 100), ("partitioned", 3)])
def test_idle_workers_do_not_spin_on_work_only_a_partition_holder_may_take(partitioning, partitions):
    def step(n, item):
        time.sleep(0.00002)
        return n + 1, [(item[0], n + 1)]

    items = [(i, 500 if i % 10 else i % 3) for i in range(3000)]   # 90% on one hot key: one partition
    flow = es.Flow("hot")
    (flow.source(es.ops.FromIterable(items), name="src")
         .key_by(lambda x: x[1], partitions=partitions).process(step, state=int).collect(name="sink"))
    result = run(flow, threads=3, ordering=es.OrderingConfig(partitioning=partitioning))
    assert len(result.outputs["sink"]) == 3000
    # Before the fix, idle workers took the task again and again (hundreds of thousands of dispatches).
    assert result.stats.operators[next(n for n in result.stats.operators if n.startswith("keyed"))].activations < 2000
