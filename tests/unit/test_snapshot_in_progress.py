"""Snapshots count an activation in progress: a slow batch's busy time shows before the batch ends."""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.metrics.period import period_between

pytestmark = pytest.mark.timeout(60)


class Blocking(es.FunctionOperator):
    """Forwards each batch once ``release`` is set, telling ``entered`` when a batch starts."""

    def __init__(self, entered: threading.Event, release: threading.Event):
        super().__init__(inputs=1, outputs=1)
        self.entered, self.release = entered, release

    def on_batch(self, items: list, port: int) -> list:
        self.entered.set()
        self.release.wait(30)
        return items


def test_a_batch_in_progress_counts_as_busy_time_of_its_operator_and_worker():
    entered, release = threading.Event(), threading.Event()
    flow = es.Flow("in-progress")
    (flow.source(es.ops.FromIterable(range(10)), name="src")
         .then(Blocking(entered, release), name="slow")
         .sink(es.ops.Collect(), name="out"))
    handle = es.Runner(threads=1, elastic=False).start(flow)
    try:
        assert entered.wait(20)
        before = handle.stats()
        time.sleep(0.2)
        during = handle.stats()
    finally:
        release.set()
    result = handle.wait(30)
    assert result.outputs["out"] == list(range(10))
    period = period_between(before, during)
    # Nothing ended in between, yet the period shows the slow operator busy for (about) all of it.
    assert period.operators["slow"].busy_s >= 0.1
    assert period.busy_s() >= 0.1
    assert result.stats.operators["slow"].busy_s >= during.operators["slow"].busy_s
