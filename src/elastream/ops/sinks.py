"""In-memory sinks: Collect and Callback.

Threading: a sink runs in one worker at a time (``max_workers`` is 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from elastream.operators.base import FunctionOperator
from elastream.operators.spec import Declared, OperatorSpec
from elastream.operators.untrack import untrack_atomic


class Collect(FunctionOperator):
    """Gather every tuple into a list: ``result.outputs[name]``, in arrival order.

    Kept tuples of atomic values are untracked from the cycle collector as they
    arrive (:func:`~elastream.operators.untrack.untrack_atomic`), so that the
    collections during the run do not walk the growing result.
    """

    kind = "sink"

    def __init__(self) -> None:
        super().__init__(inputs=1, outputs=0)
        self.items: list[Any] = []

    def open(self, ctx) -> None:
        self.items = []

    def on_batch(self, items: list, port: int) -> None:
        untrack_atomic(items)
        self.items.extend(items)

    def result(self) -> list[Any]:
        return self.items

    def spec(self) -> OperatorSpec:
        return self.spec_with(declared=Declared("collect"))


class Callback(FunctionOperator):
    """Call ``fn(item)`` for every tuple (or ``fn(batch)`` with ``batch=True``)."""

    kind = "sink"

    def __init__(self, fn: Callable[[Any], Any], batch: bool = False):
        super().__init__(inputs=1, outputs=0)
        self.fn = fn
        self.batch = batch

    def on_batch(self, items: list, port: int) -> None:
        if self.batch:
            self.fn(items)
        else:
            for x in items:
                self.fn(x)
