"""Stateful function operators: keyed (partitioned) and whole-stream (stateful).

Their step functions follow DESIGN.md: ``step(state, item) -> (new_state,
iterable_of_outputs)``; ``state`` is a zero-argument factory of the initial
state. Partitioned operators declare ``partitions`` and a ``strategy`` (hash or
range), which bound their workers (ordered-multicore §6); the runtime still
runs each as one instance until dynamic allotment lands (ordered-multicore §4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from elastream.operators.base import PARTITIONED, STATEFUL, FunctionOperator, max_parallelism

Step = Callable[[Any, Any], tuple[Any, Iterable[Any]]]
STRATEGIES = ("hash", "range")


def _check_partitioning(partitions: int, strategy: str) -> None:
    if int(partitions) < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown partitioning strategy {strategy!r}; use one of {STRATEGIES}")


class KeyedProcess(FunctionOperator):
    """Partitioned stateful operator: one state per key, ``step`` per tuple.

    Example (running count per key)::

        KeyedProcess(lambda e: e.user, lambda n, e: (n + 1, [(e.user, n + 1)]), state=int)
    """

    kind = PARTITIONED

    def __init__(self, key: Callable[[Any], Any], step: Step, state: Callable[[], Any] = dict,
                 partitions: int = 1, strategy: str = "hash"):
        super().__init__(inputs=1, outputs=1)
        _check_partitioning(partitions, strategy)
        self.key = key
        self.step = step
        self.state_factory = state
        self.partitions = int(partitions)
        self.strategy = strategy
        self.max_workers = max_parallelism(PARTITIONED, self.partitions)
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

    kind = PARTITIONED

    def __init__(self, key: Callable[[Any], Any], fn: Callable[[Any, Any], Any],
                 initial: Callable[[], Any] | None = None, partitions: int = 1, strategy: str = "hash"):
        super().__init__(inputs=1, outputs=1)
        _check_partitioning(partitions, strategy)
        self.partitions = int(partitions)
        self.strategy = strategy
        self.max_workers = max_parallelism(PARTITIONED, self.partitions)
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

    kind = STATEFUL

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
