"""The threading models (``Runner(model=...)``, IBM Streams §2.2): which thread runs which operator.

The contract suites run every flow under ``manual`` and ``dedicated`` through the execution-mode
fixture (``tests/execution_modes.py``); these tests check what makes each model itself: a thread
per operator that runs nothing else, one thread and wide fusion, and the options each refuses.
"""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.runtime.decisions import Unfuse
from elastream.workloads.overhead import CountSink

pytestmark = pytest.mark.timeout(60)


def _thread_recording_flow(n: int, seen: dict[str, set[str]]) -> es.Flow:
    """source → a → b → keyed running count → count sink; each Map records the threads that ran it."""

    def recorder(name: str):
        def fn(x):
            seen.setdefault(name, set()).add(threading.current_thread().name)
            return x
        return fn

    flow = es.Flow("models")
    stream = flow.source(range(n), name="src")
    stream = stream.map(recorder("a"), name="a").map(recorder("b"), name="b")
    stream.key_by(lambda x: x % 7).reduce(lambda acc, x: acc + 1, initial=int, name="per_key") \
        .map(recorder("c"), name="c").sink(CountSink(), name="out")
    return flow


def test_dedicated_gives_each_operator_one_thread_of_its_own():
    seen: dict[str, set[str]] = {}
    handle = es.Runner(model="dedicated").start(_thread_recording_flow(20_000, seen))
    tasks = len(handle.sched.tasks)
    result = handle.wait(30)
    assert result.outputs["out"] == 20_000
    assert tasks == len(handle.flow.operators)          # no fusion: a task per operator
    assert len(handle.pool.workers) == tasks             # and a worker per task
    assert all(len(threads) == 1 for threads in seen.values()), seen
    assert len({t for threads in seen.values() for t in threads}) == 3   # a, b and c never share a thread
    assert all(w.own is not None for w in handle.pool.workers)
    assert {w.own.name for w in handle.pool.workers} == {t.name for t in handle.sched.tasks}


def test_manual_runs_everything_on_one_thread_fused_wide():
    seen: dict[str, set[str]] = {}
    handle = es.Runner(model="manual").start(_thread_recording_flow(20_000, seen))
    result = handle.wait(30)
    assert result.outputs["out"] == 20_000
    assert len({t for threads in seen.values() for t in threads}) == 1
    assert handle.threads in (0, 1) and len(handle.pool.workers) == 1
    # the keyed count (partitioned state) and the sink join the chain, and the source calls it: no queue left
    assert handle.fused == (("src", "a", "b", "per_key", "c", "out"),)
    assert [t.name for t in handle.sched.tasks] == ["src+a+b+per_key+c+out"]


def test_manual_and_dedicated_give_the_dynamic_models_outputs():
    def outputs(model: str) -> list:
        flow = es.Flow("same")
        (flow.source(range(5_000), name="src").map(lambda x: x * 3, name="triple")
         .filter(lambda x: x % 2 == 0, name="even").key_by(lambda x: x % 10)
         .reduce(lambda acc, x: acc + x, initial=int, name="sums").sink(es.ops.Collect(), name="out"))
        return es.Runner(model=model).run(flow, timeout=30).outputs["out"]

    expected = outputs("dynamic")
    assert outputs("manual") == expected
    assert outputs("dedicated") == expected


@pytest.mark.parametrize("model", ["manual", "dedicated"])
def test_an_operator_error_names_the_operator_and_leaves_no_thread(model):
    before = threading.active_count()

    def boom(x):
        if x == 777:
            raise ValueError("bad record")
        return x

    flow = es.Flow("fails")
    flow.source(range(5_000), name="src").map(boom, name="boom").sink(CountSink(), name="out")
    with pytest.raises(es.OperatorError, match="boom"):
        es.Runner(model=model).run(flow, timeout=30)
    assert threading.active_count() == before


def test_dedicated_shutdown_mid_run_ends_every_thread():
    before = threading.active_count()
    flow = es.Flow("endless")
    flow.source(iter(int, 1), name="src").map(lambda x: x, name="m").sink(CountSink(), name="out")
    handle = es.Runner(model="dedicated").start(flow)
    handle.shutdown(timeout=10)
    assert all(not w.thread.is_alive() for w in handle.pool.workers)
    assert threading.active_count() == before


@pytest.mark.parametrize("options, message", [
    ({"model": "manual", "threads": 2}, "manual model runs the whole flow on one thread"),
    ({"model": "dedicated", "threads": 4}, "dedicated model runs one thread per operator"),
    ({"model": "manual", "elastic": es.Elastic()}, "only the dynamic model is elastic"),
    ({"model": "threads"}, "unknown model 'threads'; choose one of dynamic, dedicated, manual"),
])
def test_conflicting_options_fail_at_once_saying_what_to_change(options, message):
    with pytest.raises(ValueError, match=message):
        es.Runner(**options)


def test_dedicated_threads_cannot_be_resized():
    flow = es.Flow("fixed")
    flow.source(range(10), name="src").sink(CountSink(), name="out")
    handle = es.Runner(model="dedicated").start(flow)
    try:
        with pytest.raises(ValueError, match="fixes its threads"):
            handle.set_threads(3)
    finally:
        handle.wait(10)


# -- the manual model's source calls its chain (runtime.sourced) ---------------------------------------------


def _joined_flow(source, fail_in: str | None = None, sink: es.Operator | None = None) -> es.Flow:
    """src → a → b → keyed running sum → c → sink; the operator named ``fail_in`` raises on its 100th record."""

    def step(name: str, fn):
        calls = [0]

        def run(*args):
            calls[0] += 1
            if name == fail_in and calls[0] == 100:
                raise ValueError(f"bad record in {name}")
            return fn(*args)
        return run

    flow = es.Flow("joined")
    stream = flow.source(source, name="src").map(step("a", lambda x: x * 3), name="a")
    stream = stream.filter(step("b", lambda x: x % 2 == 0), name="b")
    (stream.key_by(lambda x: x % 10).reduce(step("per_key", lambda acc, x: acc + x), initial=int, name="per_key")
     .map(step("c", lambda x: x), name="c").sink(sink or es.ops.Collect(), name="out"))
    return flow


class _FailingSink(CountSink):
    """Counts, and raises on its third batch when ``fails``."""

    def __init__(self, fails: bool):
        super().__init__()
        self.fails = fails
        self.batches = 0

    def on_batch(self, items: list, port: int) -> None:
        self.batches += 1
        if self.fails and self.batches == 3:
            raise ValueError("bad record in out")
        super().on_batch(items, port)


def test_manual_source_calls_its_chain_as_one_task_with_no_buffer():
    handle = es.Runner(model="manual").start(_joined_flow(range(10_000)))
    (task,) = handle.sched.tasks
    result = handle.wait(30)
    assert task.name == "src+a+b+per_key+c+out"
    assert task.inputs == [] and task.outputs == []      # nothing queued anywhere: the sink ends the chain
    assert len(result.outputs["out"]) == 5_000


def test_manual_joined_chain_gives_the_dynamic_models_outputs_and_counts():
    runs = {model: es.Runner(model=model).run(_joined_flow(range(10_000)), timeout=30)
            for model in ("dynamic", "manual")}
    dynamic, manual = runs["dynamic"], runs["manual"]
    assert manual.outputs["out"] == dynamic.outputs["out"]
    names = ("src", "a", "b", "per_key", "c", "out")   # plain Runner() also lists its held replicas' splits
    counts = {model: {name: (run.stats.operators[name].kind, run.stats.operators[name].tuples_in,
                             run.stats.operators[name].tuples_out) for name in names}
              for model, run in runs.items()}
    assert counts["manual"] == counts["dynamic"]
    assert counts["manual"]["src"] == ("source", 0, 10_000)
    assert counts["manual"]["out"] == ("sink", 5_000, 0)
    stats = manual.stats.operators
    assert stats["src"].sent == {"a": 10_000} and stats["b"].sent == {"per_key": 5_000}
    assert stats["src"].inputs == () and stats["a"].inputs[0].size == 0
    assert all(s.busy_s > 0 for s in stats.values())


@pytest.mark.parametrize("fail_in", ["src", "a", "b", "per_key", "c", "out"])
def test_manual_joined_chain_error_names_the_operator_that_raised(fail_in):
    def records():
        for x in range(5_000):
            if fail_in == "src" and x == 777:
                raise ValueError("bad record in src")
            yield x

    before = threading.active_count()
    with pytest.raises(es.OperatorError) as caught:
        es.Runner(model="manual").run(_joined_flow(records(), fail_in, _FailingSink(fail_in == "out")), timeout=30)
    assert caught.value.operator == fail_in
    assert f"bad record in {fail_in}" in str(caught.value)
    assert threading.active_count() == before


def test_manual_joined_chain_is_held_back_by_a_full_queue_after_it():
    """src → a joined, then a coroutine operator (never fused) behind a port of 8: the port stays bounded."""

    class Slow(es.Operator):
        def __init__(self):
            super().__init__(inputs=1, outputs=1)

        async def process(self, ctx):
            port, out = ctx.inputs[0], ctx.outputs[0]
            while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
                await out.push(port.pop())

    flow = es.Flow("held")
    flow.source(range(3_000), name="src").map(lambda x: x + 1, name="a").then(Slow(), name="slow") \
        .sink(es.ops.Collect(), name="out")
    handle = es.Runner(model="manual", max_queue_size=8).start(flow)
    assert [t.name for t in handle.sched.tasks][0] == "src+a"
    result = handle.wait(30)
    assert result.outputs["out"] == list(range(1, 3_001))
    port = result.stats.operators["slow"].inputs[0]
    assert port.max_size <= port.capacity
    assert result.stats.operators["a"].sent == {"slow": 3_000}


def test_manual_joined_chain_shuts_down_mid_run_and_flushes_its_sink():
    before = threading.active_count()
    sink = CountSink()
    handle = es.Runner(model="manual").start(_joined_flow(iter(int, 1), sink=sink))
    deadline = time.monotonic() + 10
    while handle.stats().operators["src"].tuples_out < 2_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    live = handle.stats().operators
    assert set(handle.states()) == {"src", "a", "b", "per_key", "c", "out"}
    assert live["src"].tuples_out >= 2_000 and live["src"].kind == "source"
    result = handle.shutdown(timeout=10)
    assert all(not w.thread.is_alive() for w in handle.pool.workers)
    assert threading.active_count() == before
    assert set(handle.states().values()) == {"completed"}
    assert result.outputs["out"] == result.stats.operators["out"].tuples_in > 0


def test_manual_joined_chain_refuses_to_be_unfused_saying_why():
    flow = es.Flow("endless")
    flow.source(iter(int, 1), name="src").map(lambda x: x, name="m").sink(CountSink(), name="out")
    handle = es.Runner(model="manual").start(flow)
    try:
        (applied,) = handle.submit([Unfuse(("src", "m", "out"))])
        assert not applied.ok
        assert applied.why == "src → m → out runs as one task with its source (the manual model); it cannot be un-fused"
        assert [t.name for t in handle.sched.tasks] == ["src+m+out"]
    finally:
        handle.shutdown(timeout=10)
