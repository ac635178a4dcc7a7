"""The end-of-stream hook of the declarative stateful operators (``on_end``).

``KeyedProcess(..., on_end=fn)`` calls ``fn(key, state)`` for every key in
first-seen order once its input closes; ``StatefulProcess(..., on_end=fn)``
calls ``fn(state)``. Their outputs come after every step output. The fluent
layer exposes both as ``.process(step, state=..., on_end=...)``.
"""

from __future__ import annotations

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)


def sessions_flow(events, on_end=True) -> es.Flow:
    """Per user, a session of consecutive values; a value more than 10 above the last closes it."""
    def step(session, event):
        user, value = event
        if session and value - session[-1] > 10:
            return [value], [(user, tuple(session))]
        return [*session, value], ()

    flow = es.Flow("sessions")
    flow.source(events, name="src") \
        .key_by(lambda e: e[0]) \
        .process(step, state=list, name="sessionize",
                 on_end=(lambda user, session: [(user, tuple(session))]) if on_end else None) \
        .collect(name="out")
    return flow


EVENTS = [("b", 1), ("a", 5), ("b", 2), ("a", 30), ("c", 7), ("b", 3), ("a", 31)]


@pytest.mark.parametrize("threads", [1, 2])
def test_keyed_on_end_flushes_every_key_in_first_seen_order_after_the_steps(run_flow, threads):
    out = run_flow(sessions_flow(EVENTS), threads=threads, batch_size=2).outputs["out"]
    # The only session closed by a step ("a" jumps 5 → 30) comes first, then b, a, c as first seen.
    assert out == [("a", (5,)), ("b", (1, 2, 3)), ("a", (30, 31)), ("c", (7,))]


def test_without_on_end_open_state_is_not_emitted(run_flow):
    assert run_flow(sessions_flow(EVENTS, on_end=False)).outputs["out"] == [("a", (5,))]


def test_keyed_on_end_sees_no_key_on_an_empty_stream(run_flow):
    calls = []
    flow = es.Flow("empty")
    flow.source([], name="src").key_by(lambda x: x).process(
        lambda s, x: (s, ()), state=int, on_end=lambda k, s: calls.append(k) or [k]).collect(name="out")
    assert run_flow(flow).outputs["out"] == [] and calls == []


def test_stateful_on_end_emits_after_the_steps_and_also_on_an_empty_stream(run_flow):
    def build(items) -> es.Flow:
        flow = es.Flow("total")
        flow.source(items, name="src") \
            .process(lambda total, x: (total + x, [x] if x % 2 else ()), state=int, name="sum",
                     on_end=lambda total: [("total", total)]) \
            .collect(name="out")
        return flow

    assert run_flow(build(range(6)), batch_size=4).outputs["out"] == [1, 3, 5, ("total", 15)]
    assert run_flow(build([])).outputs["out"] == [("total", 0)]


def test_on_end_returning_nothing_emits_nothing():
    op = es.ops.StatefulProcess(lambda s, x: (s, ()), state=int, on_end=lambda s: None)
    op.open(None)
    assert op.on_inputs_closed() is None
    keyed = es.ops.KeyedProcess(lambda x: x, lambda s, x: (s, ()), state=int, on_end=lambda k, s: ())
    keyed.open(None)
    keyed.on_batch([1, 2], 0)
    assert keyed.on_inputs_closed() == []


def test_on_end_across_two_processes_equals_one_process():
    flow = sessions_flow(EVENTS * 50)
    expected = es.Runner().run(sessions_flow(EVENTS * 50), timeout=30).outputs["out"]
    placement = {"src": 0, "sessionize": 1, "out": 0}
    result = es.Runner(processes=2, placement=placement).run(flow, timeout=60)
    assert result.outputs["out"] == expected


def test_a_failing_on_end_stops_the_flow_naming_the_operator(run_flow):
    flow = es.Flow("fails")
    flow.source(range(3), name="src").key_by(lambda x: x).process(
        lambda s, x: (s, ()), state=int, name="boom", on_end=lambda k, s: 1 / 0).collect(name="out")
    with pytest.raises(es.OperatorError, match="'boom'") as info:
        es.Runner().run(flow, timeout=30)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_on_end_must_be_callable():
    with pytest.raises(TypeError, match="on_end must be callable"):
        es.ops.KeyedProcess(lambda x: x, lambda s, x: (s, ()), on_end=[1])
    with pytest.raises(TypeError, match="on_end must be callable"):
        es.Flow("f").source([1]).process(lambda s, x: (s, ()), on_end="flush")
