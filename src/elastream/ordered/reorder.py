"""Reorder buffers: release the outputs of concurrent workers in serial order (ordered-multicore §3).

Role
----
Several workers may run one stateless or partitioned stateful operator at
once ("dynamic allotment", §2.2). Each input carries the serial number it got
at enqueue (:mod:`elastream.ordered.serial`); a worker that has processed
input ``t`` offers *all* outputs of ``t`` — a list, possibly empty for a
filtered input — to the operator's reorder buffer, which calls ``emit`` with
them only after the outputs of ``0 .. t-1`` (or ``first_serial .. t-1``)
have been emitted (Theorem 3.1).

Two schemes share the :class:`ReorderBuffer` protocol and are chosen by name
with :func:`make_reorder_buffer`:

``"nonblocking"`` — :class:`NonBlockingReorderBuffer`, Fig. 4 (§3.2).
    A bounded circular array of ``capacity`` slots indexed by ``serial %
    capacity``. ``try_add`` stores the outputs if the serial is inside the
    window ``[next, next + capacity)`` and returns False otherwise; then it
    tries to become *the* sender with a test-and-set flag. The sender emits
    consecutive ready slots, clears the flag and re-checks the slot at
    ``next`` (the lost-wake-up fix of Fig. 4 lines 39–42). No worker ever
    waits for another: a worker that finds the flag taken just returns.

``"lock"`` — :class:`LockReorderBuffer`, Fig. 2 (§3.1), the baseline.
    A mutex around "park the output, emit every consecutive ready one". A
    worker that finishes while another is emitting waits for the mutex (the
    unnecessary blocking of Fig. 3). The same ``capacity`` window and
    refusal rule apply, so both schemes honour the same contract.

How the runtime should call it
------------------------------
* Create one buffer per ordered operator: ``make_reorder_buffer(scheme,
  capacity, emit, first_serial=...)`` where ``first_serial`` is the first
  serial its input queue assigns and ``emit(outputs)`` forwards one input's
  outputs downstream (e.g. ``downstream_queue.put_many``). ``emit`` is called
  by one thread at a time, in serial order, once per input with a non-empty
  output list (empty lists only advance the window). It must not block for
  long and must not call back into the same buffer.
* After processing input ``t``: ``if not rb.try_add(t, outputs): keep
  (t, outputs) and retry later``. Retry before taking more input and before
  leaving the operator; the worker never blocks. The serial at ``next`` is
  always inside the window, so the output everybody waits for is always
  accepted; keep scheduling the operator while its input is non-empty even
  if its workers hold refused outputs, and the buffer cannot deadlock.
* ``flush()`` sends whatever is ready (useful after a refused worker
  leaves); ``pending()`` and ``next_serial`` tell the runtime whether every
  accepted output has been emitted (end of stream: ``pending() == 0``).
* ``statistics()`` returns a frozen :class:`ReorderStats`.
* If ``emit`` raises, the exception propagates from the ``try_add`` or
  ``flush`` call that was sending; the failed slot stays in the buffer and
  ``next`` does not move, so the buffer stays consistent (the runtime should
  stop the flow: the operator failed).

Atomicity under the GIL (why the non-blocking scheme is correct in CPython)
---------------------------------------------------------------------------
Fig. 4 needs an atomic ``next``, atomic slot loads/stores and an atomic
test-and-set flag, all sequentially consistent. In CPython (GIL build):

* ``slots[i] = x`` and ``x = slots[i]`` on a ``list`` are one bytecode each
  and run in C without releasing the GIL: atomic.
* ``self._next`` is read by anyone but written only by the flag holder, so
  "load, add one, store" needs no atomic fetch-add: there is one writer.
* The flag is a ``threading.Lock`` used only through
  ``acquire(blocking=False)`` — a true test-and-set that never blocks — and
  ``release()`` as clear.
* Every bytecode runs while holding the GIL and a GIL hand-over is a full
  memory barrier, so all these operations are sequentially consistent, which
  is what the proof of Theorem 3.1 assumes.

Statistics take no lock either: the sender's counters are plain attributes
written only by the flag holder, and the adders' (refusals, flag
contention, window span) are per-thread cells
(:class:`~elastream.ordered.serial.ThreadCounters`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol, runtime_checkable

from elastream.ordered.serial import ThreadCounters

REORDER_SCHEMES = ("nonblocking", "lock")

Emit = Callable[[Sequence[Any]], Any]

# Per-thread adder counters of the non-blocking buffer (indices into a ThreadCounters cell).
_REFUSED, _CONTENDED, _MAX_SPAN = range(3)


@dataclass(frozen=True, slots=True)
class ReorderStats:
    """A snapshot of a reorder buffer (exact when no worker is inside it)."""

    scheme: str
    capacity: int
    added: int
    """Inputs (serials) accepted by ``try_add``."""
    refused: int
    """``try_add`` calls refused because the serial was beyond the window (the caller retries)."""
    emitted: int
    """Serials released, in order (including those with no outputs)."""
    emitted_outputs: int
    """Outputs passed to ``emit``."""
    pending: int
    """Accepted serials not yet released."""
    next_serial: int
    max_occupancy: int
    """Largest window span an accepted add needed (``serial - next + 1``): an upper bound on slots in use."""
    sender_rounds: int
    """Times a worker became the sender (flag acquired / lock-held drains)."""
    contended: int
    """Non-blocking: adds that found another sender active and returned at once.
    Lock: adds that had to wait for the mutex."""
    blocked_s: float
    """Time workers spent waiting for the mutex (always 0 for the non-blocking scheme)."""
    rechecks: int
    """Non-blocking only: times the re-check after clearing the flag found a ready slot (Fig. 4 L39–42)."""


@runtime_checkable
class ReorderBuffer(Protocol):
    """What both reorder schemes offer (see the module docstring for how to call it)."""

    scheme: str
    capacity: int

    def try_add(self, serial: int, outputs: Sequence[Any]) -> bool:
        """Offer all outputs of input ``serial``; False (nothing stored) if it is beyond the window."""
        ...

    def flush(self) -> int:
        """Emit whatever is ready; return how many serials were released by this call."""
        ...

    def pending(self) -> int:
        """Accepted serials not yet released."""
        ...

    @property
    def next_serial(self) -> int:
        """The lowest serial not yet released."""
        ...

    def statistics(self) -> ReorderStats:
        """A frozen snapshot of the counters."""
        ...


def make_reorder_buffer(scheme: str, capacity: int, emit: Emit, *, first_serial: int = 0) -> ReorderBuffer:
    """Build a reorder buffer by scheme name: ``"nonblocking"`` (Fig. 4) or ``"lock"`` (Fig. 2).

    Example::

        >>> out = []
        >>> rb = make_reorder_buffer("nonblocking", 4, out.extend)
        >>> rb.try_add(1, ["b"]), out
        (True, [])
        >>> rb.try_add(0, ["a"]), out
        (True, ['a', 'b'])
        >>> rb.try_add(9, ["z"])   # beyond the window [2, 6): keep it, retry later
        False
    """
    if scheme == "nonblocking":
        return NonBlockingReorderBuffer(capacity, emit, first_serial=first_serial)
    if scheme == "lock":
        return LockReorderBuffer(capacity, emit, first_serial=first_serial)
    raise ValueError(f"unknown reorder scheme {scheme!r}; choose one of {', '.join(REORDER_SCHEMES)}")


def _check_args(capacity: int, first_serial: int) -> None:
    if capacity < 1:
        raise ValueError(f"reorder buffer capacity must be >= 1, got {capacity}")
    if first_serial < 0:
        raise ValueError(f"first_serial must be >= 0, got {first_serial}")


def _already_released(serial: int, next_serial: int) -> ValueError:
    return ValueError(f"serial {serial} was already released (next is {next_serial}): each serial may be added once")


def _duplicate(serial: int) -> ValueError:
    return ValueError(f"serial {serial} was already added: each serial may be added once")


class NonBlockingReorderBuffer:
    """Fig. 4: bounded circular buffer, try-add, one sender at a time through a test-and-set flag.

    Invariants (Theorem 3.1, with ``s = capacity``):

    1. ``slots[t % s]`` holds the outputs of ``t`` only while ``next <= t < next + s``;
       every other slot is ``None`` (EMPTY).
    2. Only the flag holder reads a slot for sending, clears it and advances
       ``next`` — in that order, so a slot is EMPTY before the window moves
       past it and can be reused by ``t + s``.
    3. When no thread is inside ``try_add``/``flush``, the slot at ``next`` is
       EMPTY (nothing ready is left unsent): the re-check after clearing the
       flag closes the race with an adder that stored its output just after
       the sender looked and just before the sender cleared the flag.

    The common path (an accepted add) touches no shared counter: ``added``
    is derived as ``emitted + pending``; refusals, flag contention and new
    maxima of the window span go to per-thread cells.
    """

    scheme = "nonblocking"

    def __init__(self, capacity: int, emit: Emit, *, first_serial: int = 0) -> None:
        _check_args(capacity, first_serial)
        self.capacity = capacity
        self._emit = emit
        self._slots: list[Sequence[Any] | None] = [None] * capacity
        self._next = first_serial  # written only by the flag holder
        self._flag = threading.Lock()  # test-and-set via acquire(blocking=False); never waited on
        self._counters = ThreadCounters(3)
        self._span_hint = 0  # a filter for max-span updates; the exact maxima live in the cells
        self._emitted = 0  # sender-side counters: written only by the flag holder
        self._emitted_outputs = 0
        self._sender_rounds = 0
        self._rechecks = 0

    @property
    def next_serial(self) -> int:
        """The lowest serial not yet released."""
        return self._next

    def try_add(self, serial: int, outputs: Sequence[Any]) -> bool:
        """Fig. 4 ``send``: store the outputs if ``serial`` is in the window, then try to send.

        Returns False — and stores nothing — if ``serial >= next + capacity``:
        the caller keeps its outputs and retries later. Never blocks.
        Raises ``ValueError`` for a serial that was already added or released
        (a best-effort check: each serial must be added once).
        """
        # Fig. 4 try_add (L14-22). `next` only grows and cannot pass `serial`
        # before this slot is filled, so a window check on a stale `next` stays valid.
        n = self._next
        if serial >= n + self.capacity:
            self._counters.cell()[_REFUSED] += 1
            self._send_pending()
            return False
        if serial < n:
            raise _already_released(serial, n)
        if outputs is None:
            raise TypeError(f"outputs of serial {serial} must be a sequence (use [] for none), not None")
        i = serial % self.capacity
        if self._slots[i] is not None:
            raise _duplicate(serial)
        self._slots[i] = outputs
        if serial - n >= self._span_hint:
            self._note_span(serial - n + 1)
        self._send_pending()
        return True

    def flush(self) -> int:
        """Fig. 4 ``send_pending_outputs`` alone: emit what is ready unless another sender is active."""
        return self._send_pending()

    def pending(self) -> int:
        """Accepted serials not yet released (a scan of the window)."""
        return sum(1 for slot in list(self._slots) if slot is not None)

    def _note_span(self, span: int) -> None:
        cell = self._counters.cell()
        if span > cell[_MAX_SPAN]:
            cell[_MAX_SPAN] = span
        self._span_hint = span  # racy on purpose: it only decides when to look at the cell

    def _send_pending(self) -> int:
        """Fig. 4 ``send_pending_outputs`` (L24-43), with the recursion as a loop."""
        released = 0
        slots, cap = self._slots, self.capacity
        while True:
            if not self._flag.acquire(False):  # L25: test_and_set failed, another worker is sending
                self._counters.cell()[_CONTENDED] += 1
                return released
            self._sender_rounds += 1
            try:
                n = self._next
                while (outputs := slots[n % cap]) is not None:  # L27-35
                    if outputs:
                        self._emit(outputs)  # may raise: the slot and `next` stay (module docstring)
                        self._emitted_outputs += len(outputs)
                    slots[n % cap] = None  # clear before advancing (invariant 2)
                    n += 1
                    self._next = n
                    self._emitted += 1
                    released += 1
            finally:
                self._flag.release()  # L36: clear
            # L39-42: re-check, or an output stored after the last look but before
            # the clear would wait for the next add (the lost wake-up).
            if slots[self._next % cap] is None:
                return released
            self._rechecks += 1

    def statistics(self) -> ReorderStats:
        """A frozen snapshot (adder counters are summed over per-thread cells)."""
        refused, contended, _ = self._counters.totals()
        emitted, pending = self._emitted, self.pending()
        return ReorderStats(
            scheme=self.scheme, capacity=self.capacity, added=emitted + pending, refused=refused,
            emitted=emitted, emitted_outputs=self._emitted_outputs, pending=pending, next_serial=self._next,
            max_occupancy=self._counters.maximum(_MAX_SPAN), sender_rounds=self._sender_rounds,
            contended=contended, blocked_s=0.0, rechecks=self._rechecks)


class LockReorderBuffer:
    """Fig. 2: a global mutex, a waiting buffer and a ``next`` counter (the baseline).

    Everything happens under the mutex: the window check, parking the
    output, and emitting every consecutive ready output. The waiting buffer
    is a dict bounded by the same ``[next, next + capacity)`` window as the
    non-blocking scheme, so the two are interchangeable.
    """

    scheme = "lock"

    def __init__(self, capacity: int, emit: Emit, *, first_serial: int = 0) -> None:
        _check_args(capacity, first_serial)
        self.capacity = capacity
        self._emit = emit
        self._lock = threading.Lock()
        self._waiting: dict[int, Sequence[Any]] = {}
        self._next = first_serial
        self._added = self._refused = self._emitted = self._emitted_outputs = 0
        self._max_occupancy = self._sender_rounds = self._contended = 0
        self._blocked_s = 0.0

    @property
    def next_serial(self) -> int:
        """The lowest serial not yet released."""
        return self._next

    def try_add(self, serial: int, outputs: Sequence[Any]) -> bool:
        """Fig. 2 ``send`` with a bounded window: False (nothing stored) if ``serial >= next + capacity``.

        Blocks while another worker holds the mutex — that is the point of the baseline.
        """
        self._acquire()
        try:
            n = self._next
            if serial >= n + self.capacity:
                self._refused += 1
                return False
            if serial < n:
                raise _already_released(serial, n)
            if outputs is None:
                raise TypeError(f"outputs of serial {serial} must be a sequence (use [] for none), not None")
            if serial in self._waiting:
                raise _duplicate(serial)
            # Fig. 2 L3-10. The output is parked before it is sent, so an
            # exception from emit leaves it in place like the non-blocking scheme.
            self._waiting[serial] = outputs
            self._added += 1
            self._max_occupancy = max(self._max_occupancy, serial - n + 1)
            if serial == n:
                self._drain()
            return True
        finally:
            self._lock.release()

    def flush(self) -> int:
        """Emit whatever is ready (normally nothing: ``try_add`` emits eagerly)."""
        self._acquire()
        try:
            return self._drain()
        finally:
            self._lock.release()

    def pending(self) -> int:
        """Accepted serials not yet released."""
        return len(self._waiting)

    def _acquire(self) -> None:
        if self._lock.acquire(False):
            return
        t0 = perf_counter()
        self._lock.acquire()
        self._contended += 1  # counted under the mutex, so exact
        self._blocked_s += perf_counter() - t0

    def _drain(self) -> int:
        """Fig. 2 L4-9: emit the run of consecutive ready outputs; the caller holds the mutex."""
        waiting, emit = self._waiting, self._emit
        self._sender_rounds += 1
        released = 0
        try:
            while self._next in waiting:
                outputs = waiting[self._next]
                if outputs:
                    emit(outputs)
                    self._emitted_outputs += len(outputs)
                del waiting[self._next]
                self._next += 1
                released += 1
            return released
        finally:
            self._emitted += released

    def statistics(self) -> ReorderStats:
        """A frozen snapshot, taken under the mutex."""
        with self._lock:
            return ReorderStats(
                scheme=self.scheme, capacity=self.capacity, added=self._added, refused=self._refused,
                emitted=self._emitted, emitted_outputs=self._emitted_outputs, pending=len(self._waiting),
                next_serial=self._next, max_occupancy=self._max_occupancy, sender_rounds=self._sender_rounds,
                contended=self._contended, blocked_s=self._blocked_s, rechecks=0)
