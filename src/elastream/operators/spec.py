"""Operator specs: the frozen declaration of what an operator is, apart from its running instance.

Every backend (threads, worker processes, Spark) and every graph pass
(replication, placement) decides what to do with an operator from its
:class:`OperatorSpec` alone — its :class:`Kind`, key, key groups, partitions,
strategy, end-of-stream hook, whether it is one-to-one, and, for the
declarative function operators, the :class:`Declared` transform a
declarative backend runs — never from the operator's class or attributes
(DESIGN.md "Seams": spec apart from instance; ordered-multicore §1.1 for the
kinds).

An operator describes itself with :meth:`Operator.spec`; a running task gets
its own instance from :meth:`Operator.instantiate` (a shallow copy whose run
state ``open`` creates afresh), so a flow's objects hold no run state and the
same flow can run twice. Partitioned and stateful instances move state by key
group through ``export_state`` / ``import_state``
(:mod:`elastream.operators.keygroups`).

Threading: specs are immutable values, safe to share and to pickle.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastream.operators.keygroups import DEFAULT_KEY_GROUPS

#: "No bound" on the workers of a stateless operator (ordered-multicore §6: as many as there are cores).
UNBOUNDED = 1 << 20


class Kind(enum.StrEnum):
    """What an operator is (ordered-multicore §1.1, plus the ends of a flow).

    A ``StrEnum``: ``Kind.STATELESS == "stateless"``, so tables and JSON show the plain word.
    """

    SOURCE = "source"
    """Produces tuples, has no inputs (one instance)."""
    SINK = "sink"
    """Consumes tuples, has no outputs (one instance)."""
    COROUTINE = "coroutine"
    """A driver loop (``async def process``): opaque to the engine, one instance."""
    STATELESS = "stateless"
    """A function of each tuple alone: any number of instances."""
    PARTITIONED = "partitioned"
    """State per key: instances own disjoint key groups."""
    STATEFUL = "stateful"
    """One state for the whole stream: one ordered instance."""


class Driver(enum.StrEnum):
    """Which API the engine drives the operator through (an axis apart from its :class:`Kind`)."""

    COROUTINE = "coroutine"
    """``async def process(ctx)``: its own driver loop, resumed by a worker."""
    BATCH = "batch"
    """``on_batch(items, port)``: the runtime takes input and calls it with up to a budget of tuples."""
    PULL = "pull"
    """``next_batch(max_items)``: a source the runtime pulls from."""


#: Kinds of function operators that may run as several instances at once.
PARALLEL_KINDS = frozenset({Kind.STATELESS, Kind.PARTITIONED})


@dataclass(frozen=True, slots=True)
class Declared:
    """The declarative transform behind a function operator, for backends that run it themselves (Spark).

    ``transform`` is one of ``map``, ``filter``, ``flat_map``, ``union``, ``keyed_process``,
    ``keyed_reduce``, ``stateful_process``, ``collect``, ``parquet_source``; ``fn`` the per-tuple
    function (map/flat_map function, predicate, step, fold); ``state`` the initial state factory
    (or a reduce's ``initial``); ``on_end`` the end-of-stream hook; ``options`` anything else
    the transform needs (a Parquet source's path and columns).
    """

    transform: str
    fn: Callable[..., Any] | None = None
    state: Callable[[], Any] | None = None
    on_end: Callable[..., Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """What an operator is, frozen: the one thing backends and graph passes match on.

    Example::

        spec = es.ops.Map(str.upper).spec()
        spec.kind is Kind.STATELESS and spec.one_to_one     # True
        spec.declared.transform == "map"                     # True
    """

    kind: Kind
    inputs: int
    outputs: int
    driver: Driver = Driver.COROUTINE
    max_workers: int = 1
    """Most instances that may run at once (ordered-multicore §6)."""
    key: Callable[[Any], Any] | None = None
    """The key function of a partitioned operator."""
    partitions: int = 1
    """Declared partitions: bounds the workers of dynamic allotment (1: one worker)."""
    key_groups: int = 1
    """Fixed number of key groups the keys fall into (the unit of state that moves)."""
    strategy: str = "hash"
    """How keys map to partitions under dynamic allotment: "hash" or "range"."""
    key_range: tuple[Any, Any] | None = None
    """The keys' (low, high) bounds, which a "range" strategy splits evenly (None: hash instead)."""
    on_end: Callable[..., Any] | None = None
    """End-of-stream hook (its outputs follow every other output)."""
    ends_by_key: bool = False
    """The instance reports its end outputs per key (``end_by_key``), so replicas can be merged in order."""
    one_to_one: bool = False
    """Exactly one output per input, in order (lets a replica run a keyed piece in one batch)."""
    movable_state: bool = False
    """Instances implement ``export_state(groups)`` / ``import_state(state)``."""
    declared: Declared | None = None
    input_capacity: int = 0
    """Tuples (or pieces) its input port must hold at least, whatever ``max_queue_size`` is."""
    output_capacity: int = 0
    reports_as: str | None = None
    """The user's operator this instance stands for (a replica of it): errors name that operator."""
    cost_us: float | None = None
    """Declared CPU cost per tuple (µs), for offline placement and replica counts."""
    selectivity: float | None = None
    urgent: bool = False
    """Its activations hand work to another process (a ring's sending end): the scheduler runs it ahead of
    the policy's pick, since a core waits for what it sends."""

    @property
    def is_parallel(self) -> bool:
        """True for function operators that may run as several instances (stateless, partitioned)."""
        return self.kind in PARALLEL_KINDS

    @property
    def is_keyed(self) -> bool:
        return self.kind is Kind.PARTITIONED


def max_parallelism(kind: str, partitions: int = 1) -> int:
    """Most workers an operator of ``kind`` may have at once (ordered-multicore §6).

    Example: ``max_parallelism("partitioned", 8) == 8``
    """
    if kind == Kind.STATELESS:
        return UNBOUNDED
    if kind == Kind.PARTITIONED:
        return max(1, int(partitions))
    return 1


def key_groups_for(partitions: int | None) -> int:
    """The key groups of an operator declaring ``partitions`` (None or 1: the default)."""
    return DEFAULT_KEY_GROUPS if partitions is None or int(partitions) <= 1 else int(partitions)
