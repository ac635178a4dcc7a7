"""Stateful function operators: keyed (partitioned) and whole-stream (stateful).

Their step functions follow DESIGN.md: ``step(state, item) -> (new_state,
iterable_of_outputs)``; ``state`` is a zero-argument factory of the initial
state. Partitioned operators declare ``partitions`` and a ``strategy`` (hash or
range), which bound their workers (ordered-multicore §6); the runtime still
runs each as one instance until dynamic allotment lands (ordered-multicore §4).

End of stream: an optional ``on_end`` hook flushes what is still open (a
session, a window, a running aggregate) once every input has closed and
drained. For :class:`KeyedProcess` it is ``on_end(key, state) -> iterable``,
called for every key in the order the keys were first seen; for
:class:`StatefulProcess` it is ``on_end(state) -> iterable``. Their outputs
follow every output of the steps, in that order.

Threading: the runtime runs an operator in one worker at a time, so the state
dicts are never touched by two threads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from elastream.operators.base import PARTITIONED, STATEFUL, FunctionOperator, max_parallelism
from elastream.operators.keygroups import keys_in_groups
from elastream.operators.spec import Declared, OperatorSpec, key_groups_for
from elastream.operators.user_code import (TEXT_CLASSES, UNSET, check_factory, explain_step_failure,
                                           note_failed_record, note_fold_hint, refuse_text_outputs)

Step = Callable[[Any, Any], tuple[Any, Iterable[Any]]]
KeyedEnd = Callable[[Any, Any], Iterable[Any]]
StatefulEnd = Callable[[Any], Iterable[Any]]
STRATEGIES = ("hash", "range")


def _check_callable(owner: str, **functions: Any) -> None:
    # At build time, not at the first tuple of a run that may be minutes in.
    for name, fn in functions.items():
        if not callable(fn):
            raise TypeError(f"{owner}: {name} must be callable, got {fn!r}")


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _export(states: dict, groups: int, chosen: Collection[int]) -> dict:
    """Remove and return the entries of ``states`` whose keys fall in the key groups ``chosen``."""
    return {k: states.pop(k) for k in keys_in_groups(list(states), groups, chosen)}


def _check_partitioning(partitions: int, strategy: str) -> None:
    if int(partitions) < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown partitioning strategy {strategy!r}; use one of {STRATEGIES}")


class KeyedProcess(FunctionOperator):
    """Partitioned stateful operator: one state per key, ``step`` per tuple.

    ``on_end(key, state)``, when given, is called for every key (first-seen
    order) once the input closes; what it returns is emitted after everything else.

    Example (running count per key, and the final count of each key at the end)::

        KeyedProcess(lambda e: e.user, lambda n, e: (n + 1, [(e.user, n + 1)]), state=int,
                     on_end=lambda user, n: [(user, "total", n)])
    """

    kind = PARTITIONED

    def __init__(self, key: Callable[[Any], Any], step: Step, state: Callable[[], Any] = dict,
                 partitions: int = 1, strategy: str = "hash", on_end: KeyedEnd | None = None):
        super().__init__(inputs=1, outputs=1)
        _check_partitioning(partitions, strategy)
        _check_callable("KeyedProcess", key=key, step=step)
        check_factory("KeyedProcess", "state", state)
        if on_end is not None:
            _check_callable("KeyedProcess", on_end=on_end)
        self.key = key
        self.step = step
        self.state_factory = state
        self.on_end = on_end
        self.partitions = int(partitions)
        self.key_groups = key_groups_for(self.partitions)
        self.strategy = strategy
        #: The keys' (low, high) bounds for strategy="range" (dynamic allotment splits them evenly).
        self.key_range: tuple[Any, Any] | None = None
        self.max_workers = max_parallelism(PARTITIONED, self.partitions)
        self.states: dict[Any, Any] = {}

    def spec(self) -> OperatorSpec:
        return self.spec_with(key=self.key, partitions=self.partitions, key_groups=self.key_groups,
                              strategy=self.strategy, key_range=self.key_range, on_end=self.on_end, ends_by_key=True,
                              movable_state=True,
                              declared=Declared("keyed_process", self.step, self.state_factory, self.on_end))

    def open(self, ctx) -> None:
        self.states = {}

    def export_state(self, groups: Collection[int]) -> dict[Any, Any]:
        """Remove and return the state of every key in the key groups ``groups`` (key → state)."""
        return _export(self.states, self.key_groups, groups)

    def import_state(self, states: Mapping[Any, Any]) -> None:
        """Take over per-key state exported by another instance of this operator."""
        self.states.update(states)

    def on_batch(self, items: list, port: int) -> list:
        key, step, states, factory = self.key, self.step, self.states, self.state_factory
        out: list = []
        x = r = UNSET
        try:  # one try around the loop: the record and the step's contract are looked at only on failure
            for x in items:
                k = key(x)
                r = step(states[k] if k in states else factory(), x)
                s, emitted = r
                states[k] = s
                if emitted:
                    if emitted.__class__ in TEXT_CLASSES:
                        raise refuse_text_outputs(self.describe(), x, emitted)
                    out.extend(emitted)
        except Exception as exc:
            contract = explain_step_failure(exc, self.describe(), x, r, self.step)
            if contract is None:
                raise
            raise contract from None
        return out

    def on_items(self, items: list, port: int) -> list:
        key, step, states, factory = self.key, self.step, self.states, self.state_factory
        out: list = []
        x = r = UNSET
        try:
            for x in items:
                k = key(x)
                r = step(states[k] if k in states else factory(), x)
                s, emitted = r
                states[k] = s
                if emitted and emitted.__class__ in TEXT_CLASSES:
                    raise refuse_text_outputs(self.describe(), x, emitted)
                out.append(emitted)
        except Exception as exc:
            contract = explain_step_failure(exc, self.describe(), x, r, self.step)
            if contract is None:
                raise
            raise contract from None
        return out

    def describe(self) -> str:
        return f"KeyedProcess({_fn_name(self.step)})"

    def first_seen_keys(self) -> list:
        return list(self.states)  # insertion order: the first-seen order of the keys it saw

    def order_keys(self, keys: Any) -> None:
        states = self.states
        self.states = {k: states[k] for k in keys if k in states}

    def on_inputs_closed(self) -> list | None:
        if self.on_end is None:
            return None
        out: list = []
        # dicts keep insertion order, so this is the keys' first-seen order.
        for _, emitted in self.end_by_key():
            out.extend(emitted)
        return out

    def end_by_key(self) -> list[tuple[Any, list]]:
        """``(key, on_end outputs)`` for every key whose ``on_end`` emits something, in this instance's key order.

        Replicas of the operator report their ends this way, so that the ordered merge can put them in
        the keys' first-seen order over the whole stream (which no single replica knows).
        """
        if self.on_end is None:
            return []
        on_end = self.on_end
        ends = []
        for k, s in self.states.items():
            emitted = on_end(k, s)
            if emitted:
                ends.append((k, list(emitted)))
        return ends


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
        _check_callable("KeyedReduce", key=key, fn=fn)
        if initial is not None:
            check_factory("KeyedReduce", "initial", initial)
        self.partitions = int(partitions)
        self.key_groups = key_groups_for(self.partitions)
        self.strategy = strategy
        #: The keys' (low, high) bounds for strategy="range" (dynamic allotment splits them evenly).
        self.key_range: tuple[Any, Any] | None = None
        self.max_workers = max_parallelism(PARTITIONED, self.partitions)
        self.key = key
        self.fn = fn
        self.initial = initial
        self.acc: dict[Any, Any] = {}

    def spec(self) -> OperatorSpec:
        return self.spec_with(key=self.key, partitions=self.partitions, key_groups=self.key_groups,
                              strategy=self.strategy, key_range=self.key_range, one_to_one=True, movable_state=True,
                              declared=Declared("keyed_reduce", self.fn, self.initial))

    def open(self, ctx) -> None:
        self.acc = {}

    def export_state(self, groups: Collection[int]) -> dict[Any, Any]:
        """Remove and return the running fold of every key in the key groups ``groups``."""
        return _export(self.acc, self.key_groups, groups)

    def import_state(self, states: Mapping[Any, Any]) -> None:
        """Take over running folds exported by another instance of this operator."""
        self.acc.update(states)

    def on_batch(self, items: list, port: int) -> list:
        key, fn, acc, initial = self.key, self.fn, self.acc, self.initial
        out = []
        x = None
        try:  # one try around the loop: the record is looked at only on failure
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
        except Exception as exc:
            note_failed_record(exc, self.describe(), x)
            if initial is None:
                note_fold_hint(exc, self.describe())
            raise
        return out

    def describe(self) -> str:
        return f"KeyedReduce({_fn_name(self.fn)})"

    def on_items(self, items: list, port: int) -> list:
        return [[pair] for pair in self.on_batch(items, port)]


class StatefulProcess(FunctionOperator):
    """Stateful operator with one state for the whole stream (one ordered instance).

    ``on_end(state)``, when given, is called once the input closes; what it
    returns is emitted last.

    Example (emit the sum at the end only)::

        StatefulProcess(lambda total, x: (total + x, ()), state=int, on_end=lambda total: [total])
    """

    kind = STATEFUL

    def __init__(self, step: Step, state: Callable[[], Any] = dict, on_end: StatefulEnd | None = None):
        super().__init__(inputs=1, outputs=1)
        _check_callable("StatefulProcess", step=step)
        check_factory("StatefulProcess", "state", state)
        if on_end is not None:
            _check_callable("StatefulProcess", on_end=on_end)
        self.step = step
        self.state_factory = state
        self.on_end = on_end
        self.state: Any = None

    def spec(self) -> OperatorSpec:
        return self.spec_with(on_end=self.on_end, movable_state=True,
                              declared=Declared("stateful_process", self.step, self.state_factory, self.on_end))

    def open(self, ctx) -> None:
        self.state = self.state_factory()

    def export_state(self, groups: Collection[int]) -> dict[Any, Any]:
        """The whole stream's state (its one key group, 0) as ``{None: state}``; empty if 0 is not asked for."""
        return {None: self.state} if 0 in groups else {}

    def import_state(self, states: Mapping[Any, Any]) -> None:
        """Take over the state exported by another instance (``{None: state}``)."""
        if None in states:
            self.state = states[None]

    def on_batch(self, items: list, port: int) -> list:
        step, s = self.step, self.state
        out: list = []
        x = r = UNSET
        try:  # one try around the loop: the record and the step's contract are looked at only on failure
            for x in items:
                r = step(s, x)
                s, emitted = r
                if emitted:
                    if emitted.__class__ in TEXT_CLASSES:
                        raise refuse_text_outputs(self.describe(), x, emitted)
                    out.extend(emitted)
        except Exception as exc:
            self.state = s  # the records before the failing one were folded in
            contract = explain_step_failure(exc, self.describe(), x, r, self.step)
            if contract is None:
                raise
            raise contract from None
        self.state = s
        return out

    def describe(self) -> str:
        return f"StatefulProcess({_fn_name(self.step)})"

    def on_inputs_closed(self) -> list | None:
        if self.on_end is None:
            return None
        emitted = self.on_end(self.state)
        return list(emitted) if emitted else None
