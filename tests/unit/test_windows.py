"""Windowed aggregates per key (elastream.ops.windows): tumbling, sliding, session.

* Hand-worked examples: which windows a tuple opens, when each key's window is
  emitted (a later tuple of the same key, or the end of the stream; with
  close="watermark" the stream's latest time minus the lateness), late tuples.
* The same outputs, in the same order, under worker threads, partitioned
  operators and replicas in two worker processes with partition moves, as a
  sequential one-tuple-at-a-time fold (ordered-multicore Definition 5.1).
* Bad arguments fail when the flow is built, naming the argument.
"""

from __future__ import annotations

import random

import pytest

import elastream as es
from elastream.errors import OperatorError
from elastream.ops.windows import Session, Sliding, Tumbling, WindowAggregate, WindowResult, late_count
from elastream.processes.replicate import replicated_placement

pytestmark = pytest.mark.timeout(120)

EVENTS = [("a", 1.0), ("b", 2.0), ("a", 59.0), ("a", 61.0), ("b", 130.0), ("a", 30.0), ("a", 125.0)]


def key_of(event: tuple) -> str:
    return event[0]


def time_of(event: tuple) -> float:
    return event[1]


def times(acc: list, event: tuple) -> list:
    return acc + [event[1]]


def windowed(events: list, windows, build, threads: int = 1, partitions: int = 1, late: str = "drop",
             **window_kw) -> list:
    flow = es.Flow("windows")
    build(flow.source(es.ops.FromIterable(events), name="src").key_by(key_of, partitions=partitions)
          .window(windows, time=time_of, late=late, **window_kw)).sink(es.ops.Collect(), name="out")
    return es.Runner(threads=threads).run(flow, timeout=60).outputs["out"]


def count(w):
    return w.count(name="agg")


def test_tumbling_windows_close_on_the_keys_next_tuple_and_at_the_end():
    R = WindowResult
    assert windowed(EVENTS, Tumbling(60.0), count) == [
        R("a", 0.0, 60.0, 2),      # a@61 closes a's first minute; a@30 comes later: late, dropped
        R("b", 0.0, 60.0, 1),      # b@130
        R("a", 60.0, 120.0, 1),    # a@125
        R("a", 120.0, 180.0, 1),   # end of stream: keys in first-seen order
        R("b", 120.0, 180.0, 1)]


def test_sliding_windows_hold_every_tuple_of_their_span():
    got = windowed(EVENTS, Sliding(60.0, 30.0), lambda w: w.aggregate(times, initial=list, name="agg"))
    a = [(r.start, r.value) for r in got if r.key == "a"]
    assert a == [(-30.0, [1.0]), (0.0, [1.0, 59.0]), (30.0, [59.0, 61.0, 30.0]), (60.0, [61.0]),
                 (90.0, [125.0]), (120.0, [125.0])]   # a@30 is late only for [0, 60), which a@61 closed
    assert all(r.end - r.start == 60.0 for r in got)
    assert Sliding(60.0, 10.0).starts(65.0) == [10, 20, 30, 40, 50, 60]
    assert Sliding(1.0, 0.1).starts(0.35)[0] < -0.55 and len(Sliding(1.0, 0.1).starts(0.35)) == 10


def test_sessions_end_after_a_gap_and_span_last_time_plus_gap():
    R = WindowResult
    assert windowed(EVENTS, Session(30.0), count) == [
        R("a", 1.0, 31.0, 1),      # a@59: 58 s after a's last tuple
        R("b", 2.0, 32.0, 1),
        R("a", 59.0, 91.0, 2),     # a@61 extended it; a@30 is before it: late; a@125 ends it
        R("a", 125.0, 155.0, 1),
        R("b", 130.0, 160.0, 1)]
    # A tuple exactly gap seconds after the last one starts a new session (windows are half-open).
    assert [r.value for r in windowed([("k", 0.0), ("k", 10.0), ("k", 20.0)], Session(10.0), count)] == [1, 1, 1]


def test_without_initial_the_windows_first_tuple_starts_the_fold():
    got = windowed([("k", 0.0, 5), ("k", 1.0, 7), ("k", 11.0, 1)], Tumbling(10.0),
                   lambda w: w.aggregate(lambda acc, e: (acc[0], acc[1], acc[2] + e[2]), name="agg"))
    assert [r.value for r in got] == [("k", 0.0, 12), ("k", 11.0, 1)]


def test_late_tuples_are_counted_by_default_and_fail_when_asked():
    op = WindowAggregate(key_of, Tumbling(60.0), time_of, lambda n, _: n + 1, initial=int)
    op.open(None)
    op.on_batch(EVENTS, 0)
    assert late_count(op.states["a"]) == 1 and late_count(op.states["b"]) == 0

    with pytest.raises(OperatorError, match="late tuple for key 'a'") as info:
        windowed(EVENTS, Tumbling(60.0), count, late="fail")
    assert info.value.operator == "agg"


def test_watermark_closes_the_windows_of_quiet_keys_in_end_order():
    R = WindowResult
    assert windowed(EVENTS, Tumbling(60.0), count, close="watermark") == [
        R("a", 0.0, 60.0, 2), R("b", 0.0, 60.0, 1),   # a@61 moves the watermark past 60: b's window too
        R("a", 60.0, 120.0, 1),                          # b@130; a@30 is late
        R("b", 120.0, 180.0, 1), R("a", 120.0, 180.0, 1)]  # the end: by end, then first update
    # Lateness lets a@30 in: the watermark trails the latest time by 100 s.
    assert windowed(EVENTS, Tumbling(60.0), count, close="watermark", lateness=100.0)[0] == R("a", 0.0, 60.0, 3)
    assert windowed(EVENTS, Tumbling(60.0), count, lateness=100.0)[0] == R("a", 0.0, 60.0, 3)
    # A session that grows moves to its new end; the quiet key's session closes when the stream passes it.
    events = [("a", 0.0), ("q", 1.0), ("a", 10.0), ("a", 20.0), ("b", 100.0), ("b", 101.0)]
    assert windowed(events, Session(15.0), count, close="watermark", threads=2, partitions=4)[:2] == [
        R("q", 1.0, 16.0, 1), R("a", 0.0, 35.0, 3)]


def test_a_late_update_fails_in_the_closer_when_asked():
    with pytest.raises(OperatorError, match="late tuple for key 'b'") as info:
        windowed([("a", 1.0), ("a", 70.0), ("b", 50.0)], Tumbling(60.0), count, late="fail", close="watermark")
    assert info.value.operator == "agg-close"


@pytest.mark.parametrize("close", ["key", "watermark"])
@pytest.mark.parametrize("windows", [Tumbling(7.0), Sliding(9.0, 3.0), Session(4.0)], ids=repr)
def test_threads_partitions_and_processes_give_the_sequential_output(windows, close):
    rng = random.Random(5)
    # Roughly ordered times with some disorder (some tuples late), 40 keys.
    events = [(f"k{rng.randrange(40)}", i * 0.5 + rng.uniform(-6.0, 1.0)) for i in range(3000)]

    def agg(w):
        return w.aggregate(times, initial=list, name="agg")

    sequential = windowed(events, windows, agg, close=close)  # one thread, one instance of each operator
    assert len(sequential) > 300
    if close == "key":  # the engine's single run is itself the fold, one tuple at a time
        op = WindowAggregate(key_of, windows, time_of, times, initial=list)
        op.open(None)
        assert sequential == [out for e in events for out in op.on_batch([e], 0)] + op.on_inputs_closed()
        assert sum(late_count(s) for s in op.states.values()) > 0

    assert windowed(events, windows, agg, threads=2, partitions=8, close=close) == sequential

    flow = es.Flow("windows-p2")
    agg(flow.source(es.ops.FromIterable(events), name="src").key_by(key_of, partitions=8)
        .window(windows, time=time_of, close=close)).sink(es.ops.Collect(), name="out")
    base = {"src": 0, "out": 0, **({"agg-close": 0} if close == "watermark" else {})}
    placement = replicated_placement(flow, 2, {"agg": 2}, placement=base)
    runner = es.Runner(processes=2, placement=placement, replicas={"agg": 2})
    assert runner.run(flow, timeout=90).outputs["out"] == sequential


def test_bad_arguments_fail_when_the_flow_is_built():
    with pytest.raises(ValueError, match="size must be a positive number"):
        Tumbling(0)
    with pytest.raises(ValueError, match="slide .* larger than size"):
        Sliding(10.0, 20.0)
    with pytest.raises(ValueError, match="would fall in 3600000 windows"):
        Sliding(3600.0, 0.001)
    with pytest.raises(ValueError, match="gap must be a positive"):
        Session(float("nan"))
    with pytest.raises(ValueError, match="late must be one of"):
        WindowAggregate(key_of, Tumbling(1.0), time_of, times, late="keep")
    with pytest.raises(TypeError, match="windows must be Tumbling, Sliding or Session"):
        WindowAggregate(key_of, 60.0, time_of, times)
    with pytest.raises(TypeError, match="time must be callable"):
        es.Flow("f").source([1]).key_by(key_of).window(Tumbling(1.0), time=3.0).count()
    with pytest.raises(ValueError, match="close must be one of"):
        es.Flow("f").source([1]).key_by(key_of).window(Tumbling(1.0), time=time_of, close="never")
    with pytest.raises(ValueError, match="lateness must be a number of seconds >= 0"):
        es.Flow("f").source([1]).key_by(key_of).window(Tumbling(1.0), time_of, close="watermark", lateness=-1).count()
    with pytest.raises(ValueError, match="sessions take no lateness"):
        WindowAggregate(key_of, Session(5.0), time_of, times, lateness=1.0)
