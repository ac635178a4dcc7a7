"""Serial numbers for ordered processing (ordered-multicore §3, §5) and GIL-safe counters.

Role
----
Every input of a data-parallel (stateless) or partitioned stateful operator
gets a unique, increasing serial number *when it is enqueued* to the
operator's worklist (§3: "assigned using an atomic counter at the time of
enqueueing"). One input that produces several outputs keeps its one serial
number; the reorder buffer (:mod:`elastream.ordered.reorder`) releases the
outputs of serial ``t`` only after those of ``0 .. t-1``.

This module offers

* :class:`SerialCounter` — the per-operator counter. It is *not* thread-safe
  on its own, on purpose: it must be advanced under the operator's input-queue
  lock, in the same critical section that enqueues the input, so that queue
  order equals serial order (a lone atomic counter would let two producers
  take serials 5 and 6 and enqueue them as 6, 5).
* :class:`SerialQueue` — the shared worklist of a stateless operator (§5: a
  multi-producer multi-consumer queue plus the serial counter), which does
  exactly that.
* :class:`ThreadCounters` — statistics counters that many threads bump
  without a lock (each thread owns its cell).

Threading model
---------------
``SerialQueue``: any number of producer threads call ``put``/``put_many`` and
any number of worker threads call ``take``; one short internal lock makes
"assign serial + enqueue" and "dequeue a batch" atomic. Nobody ever waits for
another thread's *processing*, only for a few list operations.

``ThreadCounters``: ``cell()`` from any thread (returns that thread's cell,
which only that thread writes); ``totals()``/``maximum()`` from any thread
(a snapshot; exact when the writers are quiescent).

Example::

    >>> q = SerialQueue()
    >>> q.put_many("abc")
    range(0, 3)
    >>> q.take(2)
    [(0, 'a'), (1, 'b')]
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class SerialCounter:
    """Hands out consecutive serial numbers, starting at ``first``.

    Call :meth:`take` under the lock that also enqueues the input (see the
    module docstring); the counter itself does no locking.

    Example::

        >>> c = SerialCounter(first=1)
        >>> c.take(), c.take(3), c.peek()
        (1, 2, 5)
    """

    __slots__ = ("_next",)

    def __init__(self, first: int = 0) -> None:
        if first < 0:
            raise ValueError(f"first serial must be >= 0, got {first}")
        self._next = first

    def take(self, n: int = 1) -> int:
        """Reserve ``n`` consecutive serials; return the first of them."""
        if n < 0:
            raise ValueError(f"cannot take {n} serial numbers")
        first = self._next
        self._next = first + n
        return first

    def peek(self) -> int:
        """The serial the next :meth:`take` will return."""
        return self._next

    def advance_past(self, serial: int) -> None:
        """Make the next serial ``serial + 1`` (an externally assigned serial was used).

        Raises ``ValueError`` if ``serial`` is below the next serial: serials
        must arrive in increasing order.
        """
        if serial < self._next:
            raise ValueError(f"serial {serial} is not increasing (next expected >= {self._next})")
        self._next = serial + 1


@dataclass(frozen=True, slots=True)
class SerialQueueStats:
    """A snapshot of a :class:`SerialQueue`."""

    puts: int
    taken: int
    backlog: int
    max_backlog: int
    next_serial: int


class SerialQueue(Generic[T]):
    """The shared worklist of a stateless operator: FIFO of ``(serial, item)`` (§5).

    Serials are assigned at enqueue under the queue's lock, so the queue holds
    them in increasing order and ``take`` hands them out in that order — the
    "almost in arrival order" processing that keeps the reorder buffer's
    window small (§1.1.2, §3.2 *Progress*).
    """

    def __init__(self, first_serial: int = 0) -> None:
        self._lock = threading.Lock()
        self._items: deque[tuple[int, T]] = deque()
        self._serials = SerialCounter(first_serial)
        self._puts = 0
        self._taken = 0
        self._max_backlog = 0

    def put(self, item: T) -> int:
        """Enqueue one input; return its serial number."""
        with self._lock:
            serial = self._serials.take()
            self._items.append((serial, item))
            self._note_put(1)
        return serial

    def put_many(self, items: Iterable[T]) -> range:
        """Enqueue several inputs with consecutive serials; return those serials."""
        batch = list(items)
        with self._lock:
            first = self._serials.take(len(batch))
            self._items.extend(zip(range(first, first + len(batch)), batch))
            self._note_put(len(batch))
        return range(first, first + len(batch))

    def take(self, budget: int) -> list[tuple[int, T]]:
        """Dequeue up to ``budget`` inputs as ``(serial, item)``, lowest serials first; ``[]`` if empty."""
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        with self._lock:
            items = self._items
            n = min(budget, len(items))
            batch = [items.popleft() for _ in range(n)]
            self._taken += n
        return batch

    def __len__(self) -> int:
        return len(self._items)

    @property
    def next_serial(self) -> int:
        """The serial the next ``put`` will assign."""
        return self._serials.peek()

    def statistics(self) -> SerialQueueStats:
        """A frozen snapshot of the counters."""
        with self._lock:
            return SerialQueueStats(self._puts, self._taken, len(self._items), self._max_backlog,
                                    self._serials.peek())

    def _note_put(self, n: int) -> None:
        self._puts += n
        if len(self._items) > self._max_backlog:
            self._max_backlog = len(self._items)


class ThreadCounters:
    """Statistics counters bumped by many threads without a lock.

    ``x += 1`` on a shared attribute is three bytecodes and loses updates
    under contention even with the GIL. Here each thread gets its own cell (a
    list of ``fields`` ints) through a ``threading.local``; only that thread
    writes it, so plain ``cell[i] += 1`` is exact. Readers sum (or take the
    maximum of) the cells; cells of finished threads are kept.

    Example::

        >>> c = ThreadCounters(2)
        >>> cell = c.cell(); cell[0] += 3; cell[1] = max(cell[1], 7)
        >>> c.totals()[0], c.maximum(1)
        (3, 7)
    """

    __slots__ = ("_fields", "_local", "_cells")

    def __init__(self, fields: int) -> None:
        self._fields = fields
        self._local = threading.local()
        self._cells: list[list[int]] = []

    def cell(self) -> list[int]:
        """The calling thread's cell (created on first use)."""
        try:
            return self._local.cell
        except AttributeError:
            cell = [0] * self._fields
            self._local.cell = cell
            self._cells.append(cell)  # list.append is atomic under the GIL
            return cell

    def totals(self) -> list[int]:
        """Per-field sums over every thread's cell."""
        cells = list(self._cells)
        return [sum(c[i] for c in cells) for i in range(self._fields)]

    def maximum(self, field: int) -> int:
        """The largest value of one field over every thread's cell (0 if none)."""
        return max((c[field] for c in list(self._cells)), default=0)
