"""Stateful function operators: keyed (partitioned) and whole-stream (stateful).

Their step functions follow DESIGN.md: ``step(state, item) -> (new_state,
iterable_of_outputs)``; ``state`` is a zero-argument factory of the initial
state. For now each runs as one instance; the ordered-parallelism layer will
spread partitioned ones over several workers (ordered-multicore §4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from elastream.operators.base import FunctionOperator

Step = Callable[[Any, Any], tuple[Any, Iterable[Any]]]


class KeyedProcess(FunctionOperator):
    """Partitioned stateful operator: one state per key, ``step`` per tuple.

    Example (running count per key)::

        KeyedProcess(lambda e: e.user, lambda n, e: (n + 1, [(e.user, n + 1)]), state=int)
    """

    kind = "partitioned"

    def __init__(self, key: Callable[[Any], Any], step: Step, state: Callable[[], Any] = dict,
                 partitions: int = 1):
        super().__init__(inputs=1, outputs=1)
        self.key = key
        self.step = step
        self.state_factory = state
        self.partitions = partitions
        self.states: dict[Any, Any] = {}

    def open(self, ctx) -> None:
        self.states = {}

    def on_batch(self, items: list, port: int) -> list:
        key, step, states, factory = self.key, self.step, self.states, self.state_factory
        out: list = []
        for x in items:
            k = key(x)
            s = states[k] if k in states else factory()
            s, emitted = step(s, x)
            states[k] = s
            if emitted:
                out.extend(emitted)
        return out


class KeyedReduce(FunctionOperator):
    """Emit ``(key, running fold)`` per tuple: ``fn(acc, item)`` folded per key.

    The first item of a key is its initial accumulator unless ``initial`` (a
    zero-argument factory) is given.
    """

    kind = "partitioned"

    def __init__(self, key: Callable[[Any], Any], fn: Callable[[Any, Any], Any],
                 initial: Callable[[], Any] | None = None):
        super().__init__(inputs=1, outputs=1)
        self.key = key
        self.fn = fn
        self.initial = initial
        self.acc: dict[Any, Any] = {}

    def open(self, ctx) -> None:
        self.acc = {}

    def on_batch(self, items: list, port: int) -> list:
        key, fn, acc, initial = self.key, self.fn, self.acc, self.initial
        out = []
        for x in items:
            k = key(x)
            if k in acc:
                v = fn(acc[k], x)
            elif initial is not None:
                v = fn(initial(), x)
            else:
                v = x
            acc[k] = v
            out.append((k, v))
        return out


class StatefulProcess(FunctionOperator):
    """Stateful operator with one state for the whole stream (one ordered instance)."""

    kind = "stateful"

    def __init__(self, step: Step, state: Callable[[], Any] = dict):
        super().__init__(inputs=1, outputs=1)
        self.step = step
        self.state_factory = state
        self.state: Any = None

    def open(self, ctx) -> None:
        self.state = self.state_factory()

    def on_batch(self, items: list, port: int) -> list:
        step, s = self.step, self.state
        out: list = []
        for x in items:
            s, emitted = step(s, x)
            if emitted:
                out.extend(emitted)
        self.state = s
        return out
