"""The threading models (``Runner(model=...)``, IBM Streams §2.2): which thread runs which operator.

The contract suites run every flow under ``manual`` and ``dedicated`` through the execution-mode
fixture (``tests/execution_modes.py``); these tests check what makes each model itself: a thread
per operator that runs nothing else, one thread and wide fusion, and the options each refuses.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
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
    # the keyed count (partitioned state) and the sink join the chain: one queue is left, after the source
    assert handle.fused == (("a", "b", "per_key", "c", "out"),)
    assert [t.name for t in handle.sched.tasks] == ["src", "a+b+per_key+c+out"]


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
