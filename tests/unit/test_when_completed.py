"""ThreadRunHandle.when_completed: a signal once an operator's task has completed (used by held workers)."""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.runtime.config import RunConfig
from elastream.runtime.engine import start_threads

pytestmark = pytest.mark.timeout(60)


def gated(gate: threading.Event):
    yield 1
    gate.wait(20.0)
    yield 2


def test_the_callback_runs_once_the_named_operator_completes_and_at_once_after():
    gate = threading.Event()
    flow = es.Flow("hook")
    flow.source(es.ops.FromIterable(gated(gate)), name="src").map(lambda x: x, name="m").sink(es.ops.Collect(),
                                                                                              name="out")
    handle = start_threads(flow, RunConfig(threads=1))
    calls: list[str] = []
    try:
        handle.when_completed("out", lambda: calls.append("out"))
        handle.when_completed("no such operator", lambda: calls.append("never"))
        assert calls == []
    finally:
        gate.set()
    assert handle.wait(30).outputs["out"] == [1, 2]
    assert calls == ["out"]
    handle.when_completed("m", lambda: calls.append("late"))  # completed already: now, on this thread
    assert calls == ["out", "late"]
