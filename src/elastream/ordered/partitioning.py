"""Partitioned input of a partitioned stateful operator: the shared interface (ordered-multicore §4).

Role
----
A partitioned stateful operator's state is split by key; keys are mapped to
``p`` partitions (buckets) by a *partitioning strategy* (§2.1): ``hash`` or
``range``. Tuples of one partition must be processed one at a time and in
arrival order; different partitions may run on different workers at once.
Two implementations of that input side share the :class:`PartitionedInput`
protocol and are chosen by name with :func:`make_partitioned_input`:

``"hybrid"`` — :class:`~elastream.ordered.hybrid_queue.HybridQueue`, §4.3 Fig. 7.
``"partitioned"`` — :class:`~elastream.ordered.partitioned_queue.PartitionedQueue`, §4.2 (baseline).

How the runtime should call it
------------------------------
* Upstream (one sender at a time, e.g. the upstream reorder buffer's
  ``emit``, or several producers — both are safe): ``put(key, item)`` or
  ``put_many([(key, item), ...])``. Serials are assigned at enqueue under the
  input's lock (§3); pass ``serial=`` only when they were assigned upstream
  (e.g. by a cross-process split), in increasing order.
* A worker allotted to the operator, for a budget of ``b`` tuples::

      while b > 0 and (claim := inp.take(b, worker=w)) is not None:
          try:
              for serial, key, item in claim.items:
                  outputs = step(state_of(key), item)
                  if not reorder.try_add(serial, outputs): keep and retry later
          finally:
              inp.done(claim.partition)
          b -= len(claim.items)

  ``take`` never waits for another worker's processing; ``None`` means "no
  work this worker may take now". ``done`` must be called exactly once per
  claim (in a ``finally``), from any thread. While a claim is held, nobody
  else gets that partition — so the operator may keep one state object per
  key (or partition) without locking it.
* ``worker`` is ignored by the hybrid queue and identifies the worker slot of
  the partitioned baseline (default: the calling thread, bound to a slot on
  its first ``take``).
* End of stream: the input is drained when ``is_idle()`` (nothing queued,
  no claim held).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

PARTITIONING_SCHEMES = ("hybrid", "partitioned")
PARTITION_STRATEGIES = ("hash", "range")

Entry = tuple[int, Hashable, Any]
"""One queued input: ``(serial, key, item)``."""

Partitioner = Callable[[Hashable], int]
"""Maps a key to a partition index in ``range(partitions)``."""


class Claim(NamedTuple):
    """What ``take`` hands a worker: exclusive use of ``partition`` and its next ``items``.

    ``items`` are ``(serial, key, item)`` in arrival order (per-partition FIFO).
    """

    partition: int
    items: list[Entry]


@dataclass(frozen=True, slots=True)
class PartitionedInputStats:
    """A snapshot of a partitioned input."""

    scheme: str
    partitions: int
    puts: int
    taken: int
    """Tuples handed to workers."""
    claims: int
    """Successful ``take`` calls."""
    empty_takes: int
    """``take`` calls that returned None."""
    delegations: int
    """Hybrid only: master-queue entries handed over to a partition's active worker (Fig. 7 L10)."""
    requeues: int
    """Hybrid only: ``done`` calls that put a partition back because delegated work had arrived."""
    backlog: int
    """Tuples queued and not yet handed to a worker."""
    max_backlog: int
    active: int
    """Partitions currently claimed."""
    max_partition_share: float
    """Largest fraction of all puts that went to one partition (the skew)."""


@runtime_checkable
class PartitionedInput(Protocol):
    """What both partitioning schemes offer (see the module docstring for how to call it)."""

    scheme: str
    partitions: int

    def put(self, key: Hashable, item: Any, serial: int | None = None) -> int:
        """Enqueue ``item`` under ``key``; return its serial number."""
        ...

    def put_many(self, pairs: Iterable[tuple[Hashable, Any]]) -> range:
        """Enqueue ``(key, item)`` pairs with consecutive serials; return those serials."""
        ...

    def take(self, budget: int, worker: int | None = None) -> Claim | None:
        """Claim one partition and up to ``budget`` of its tuples, or None; never waits."""
        ...

    def done(self, partition: int) -> None:
        """Release a claim returned by :meth:`take`."""
        ...

    def __len__(self) -> int:
        """Tuples queued and not yet handed to a worker."""
        ...

    def is_idle(self) -> bool:
        """Nothing queued and no claim held."""
        ...

    def claimable(self, slots: Iterable[int] | None = None) -> bool:
        """Would a ``take`` by a worker serving ``slots`` (None: any) find work now?"""
        ...

    def statistics(self) -> PartitionedInputStats:
        """A frozen snapshot of the counters."""
        ...


class HashPartitioner:
    """``hash(key) % partitions``.

    Python salts ``str``/``bytes`` hashes per process (PYTHONHASHSEED), so the
    mapping is stable within one process only; use integer keys or a custom
    partitioner when partitions must agree across processes.

    Example::

        >>> HashPartitioner(4)(10)
        2
    """

    __slots__ = ("partitions",)

    def __init__(self, partitions: int) -> None:
        _check_partitions(partitions)
        self.partitions = partitions

    def __call__(self, key: Hashable) -> int:
        return hash(key) % self.partitions


class RangePartitioner:
    """Contiguous key ranges: partition ``i`` holds ``bounds[i-1] <= key < bounds[i]``.

    ``bounds`` are the ``partitions - 1`` ascending split points; keys below
    the first go to partition 0 and keys at or above the last to the last one.

    Example::

        >>> r = RangePartitioner.uniform(0, 100, 4)
        >>> r.bounds, r(-5), r(30), r(99), r(1000)
        ([25.0, 50.0, 75.0], 0, 1, 3, 3)
    """

    __slots__ = ("bounds", "partitions")

    def __init__(self, bounds: Sequence[Any]) -> None:
        bounds = list(bounds)
        if any(not a < b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(f"range partition bounds must be strictly ascending, got {bounds}")
        self.bounds = bounds
        self.partitions = len(bounds) + 1

    @classmethod
    def uniform(cls, low: float, high: float, partitions: int) -> RangePartitioner:
        """``partitions`` equal-width ranges over ``[low, high)``."""
        _check_partitions(partitions)
        if not low < high:
            raise ValueError(f"key_range must have low < high, got ({low}, {high})")
        width = (high - low) / partitions
        return cls([low + width * i for i in range(1, partitions)])

    def __call__(self, key: Any) -> int:
        return bisect_right(self.bounds, key)


def make_partitioner(strategy: str, partitions: int, *, key_range: tuple[float, float] | None = None,
                     bounds: Sequence[Any] | None = None) -> HashPartitioner | RangePartitioner:
    """A partitioning strategy by name (§2.1): ``"hash"``, or ``"range"`` with ``key_range`` or ``bounds``."""
    if strategy == "hash":
        return HashPartitioner(partitions)
    if strategy != "range":
        raise ValueError(f"unknown partitioning strategy {strategy!r}; choose one of "
                         f"{', '.join(PARTITION_STRATEGIES)}")
    if bounds is not None:
        r = RangePartitioner(bounds)
        if r.partitions != partitions:
            raise ValueError(f"range partitioning into {partitions} partitions needs {partitions - 1} bounds, "
                             f"got {len(r.bounds)}")
        return r
    if key_range is None:
        raise ValueError("range partitioning needs key_range=(low, high) or bounds=[...]")
    return RangePartitioner.uniform(key_range[0], key_range[1], partitions)


def make_partitioned_input(scheme: str, partitions: int, *, strategy: str = "hash",
                           key_range: tuple[float, float] | None = None, bounds: Sequence[Any] | None = None,
                           partitioner: Partitioner | None = None, workers: int | None = None,
                           first_serial: int = 0, claim_ahead: bool = False) -> PartitionedInput:
    """Build a partitioned input by scheme name: ``"hybrid"`` (Fig. 7) or ``"partitioned"`` (§4.2).

    ``partitioner`` overrides ``strategy``; it must return ints in
    ``range(partitions)``. ``workers`` matters only to the partitioned
    baseline (how many worker slots share the partitions; default
    ``partitions``, one queue per worker as in §7.2). ``claim_ahead`` lets a
    hybrid-queue claim take its partition's queued tuples beyond the run at
    the head of the master queue (see :meth:`HybridQueue._pop_ahead`).

    Example::

        >>> q = make_partitioned_input("hybrid", 4)
        >>> q.put_many([("a", 1), ("a", 2)])
        range(0, 2)
        >>> claim = q.take(10)
        >>> [item for _, _, item in claim.items]
        [1, 2]
        >>> q.done(claim.partition); q.is_idle()
        True
    """
    part = partitioner if partitioner is not None else make_partitioner(strategy, partitions, key_range=key_range,
                                                                         bounds=bounds)
    if scheme == "hybrid":
        from elastream.ordered.hybrid_queue import HybridQueue

        return HybridQueue(part, partitions, first_serial=first_serial, claim_ahead=claim_ahead)
    if scheme == "partitioned":
        from elastream.ordered.partitioned_queue import PartitionedQueue

        return PartitionedQueue(part, partitions, workers=workers, first_serial=first_serial)
    raise ValueError(f"unknown partitioning scheme {scheme!r}; choose one of {', '.join(PARTITIONING_SCHEMES)}")


def check_partition(partitioner: Partitioner, key: Hashable, partitions: int) -> int:
    """``partitioner(key)``, validated to lie in ``range(partitions)``."""
    p = partitioner(key)
    if not (isinstance(p, int) and 0 <= p < partitions):
        raise ValueError(f"partitioner mapped key {key!r} to {p!r}, not a partition in range({partitions})")
    return p


def _check_partitions(partitions: int) -> None:
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")


class PartitionedInputBase:
    """What both schemes share: per-partition FIFO queues, serial assignment at enqueue, counters.

    Subclasses implement ``take``/``done`` and may extend :meth:`_enqueue`
    (called under ``self._lock``). All state is guarded by ``self._lock``,
    held only for a few deque operations — never while a tuple is processed.
    """

    scheme = ""

    def __init__(self, partitioner: Partitioner, partitions: int, *, first_serial: int = 0) -> None:
        from elastream.ordered.serial import SerialCounter

        _check_partitions(partitions)
        declared = getattr(partitioner, "partitions", partitions)
        if declared != partitions:
            raise ValueError(f"partitioner has {declared} partitions, input has {partitions}")
        self.partitions = partitions
        self._partitioner = partitioner
        self._lock = threading.Lock()
        self._queues: list[deque[Entry]] = [deque() for _ in range(partitions)]
        self._active = [False] * partitions
        self._serials = SerialCounter(first_serial)
        self._backlog = 0
        self._n_active = 0
        self._puts = self._taken = self._claims = self._empty_takes = self._max_backlog = 0
        self._puts_per_partition = [0] * partitions

    def put(self, key: Hashable, item: Any, serial: int | None = None) -> int:
        """Enqueue ``item`` under ``key``; assign (or check, if given) its serial; return the serial."""
        p = check_partition(self._partitioner, key, self.partitions)
        with self._lock:
            if serial is None:
                serial = self._serials.take()
            else:
                self._serials.advance_past(serial)
            self._enqueue(p, (serial, key, item))
            self._note_puts(1)
        return serial

    def put_many(self, pairs: Iterable[tuple[Hashable, Any]]) -> range:
        """Enqueue ``(key, item)`` pairs with consecutive serials (one lock hold); return the serials."""
        n, parts = self.partitions, self._partitioner
        routed = [(check_partition(parts, key, n), key, item) for key, item in pairs]
        with self._lock:
            first = self._serials.take(len(routed))
            for serial, (p, key, item) in enumerate(routed, first):
                self._enqueue(p, (serial, key, item))
            self._note_puts(len(routed))
        return range(first, first + len(routed))

    def __len__(self) -> int:
        return self._backlog

    def is_idle(self) -> bool:
        """Nothing queued and no claim held."""
        with self._lock:
            return self._backlog == 0 and self._n_active == 0

    def _enqueue(self, p: int, entry: Entry) -> None:
        self._queues[p].append(entry)
        self._puts_per_partition[p] += 1

    def _note_puts(self, n: int) -> None:
        self._puts += n
        self._backlog += n
        if self._backlog > self._max_backlog:
            self._max_backlog = self._backlog

    def _claim(self, p: int, items: list[Entry]) -> Claim:
        """Mark ``p`` active and account for handing ``items`` out; the caller holds the lock."""
        self._active[p] = True
        self._n_active += 1
        self._claims += 1
        self._taken += len(items)
        self._backlog -= len(items)
        return Claim(p, items)

    def _release(self, partition: int) -> None:
        """Mark ``partition`` inactive; the caller holds the lock."""
        if not (0 <= partition < self.partitions and self._active[partition]):
            raise ValueError(f"done({partition}): partition {partition} is not claimed")
        self._active[partition] = False
        self._n_active -= 1

    def _stats(self, delegations: int = 0, requeues: int = 0) -> PartitionedInputStats:
        share = max(self._puts_per_partition) / self._puts if self._puts else 0.0
        return PartitionedInputStats(
            scheme=self.scheme, partitions=self.partitions, puts=self._puts, taken=self._taken,
            claims=self._claims, empty_takes=self._empty_takes, delegations=delegations, requeues=requeues,
            backlog=self._backlog, max_backlog=self._max_backlog, active=self._n_active,
            max_partition_share=share)


def pop_items(queue: deque[Entry], n: int) -> list[Entry]:
    """The first ``n`` entries of ``queue``, removed."""
    return [queue.popleft() for _ in range(n)]
