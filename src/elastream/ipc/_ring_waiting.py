"""The ring's waits and wake-ups: announced sleeps on the wake pipe or a futex, hybrid polling, read waiters.

Role: how either side of a :class:`~elastream.ipc.ring.SharedRing` waits
without spinning for long, and how the other side wakes it only when needed.
A waiting consumer polls ~50 µs, then — when records come at a steady pace —
sleeps until just before the next one is due and polls a short window around
it (hybrid polling, :mod:`elastream.ipc.arrivals`), else announces itself in
the header (a flag set with a full barrier), re-checks, and sleeps on its
wake pipe (or on a futex when a producer cannot open the pipe). A producer
that publishes makes a wake-up syscall only when it finds the announcement (one
plain load otherwise), and clears it just before waking, so nothing runs on
the consumer's side between a wake-up and its next read. Producers blocked on
a full ring sleep on a futex on the read cursor itself. Also the blocking
reads (:meth:`~RingWaiting.wait_readable`, the loop under ``read`` /
``read_views``) and :class:`ReadWaiter`, which lets a poller thread sleep on
the consumer's wake pipe.

Threading and process model: the consumer's waits run in whichever of its
process's threads calls a blocking read; they take the consumer lock for each
attempt, not while sleeping (the C nap and polling window hold it, with the
GIL released; ``close()`` takes it before unmapping). A producer's wake-up
(:meth:`~RingWaiting._wake_consumer`) runs in the producing thread, in any
process; each handle opens the consumer's wake pipe once per consumer token
(under ``_wake_lock``). A producer's wait for space runs in the writing
thread.

:class:`RingWaiting` is a mixin of :class:`~elastream.ipc.ring.SharedRing`:
its state is set by :meth:`~RingWaiting._init_waiting` from the ring's
constructor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from elastream.ipc._ring_format import (_W_DATA_SEQ, _W_DATA_WAITERS, _W_LAST_PUBLISH_NS, _W_POLL_HITS,
                                        _W_POLL_WINDOWS, _W_READ_POLL_NS, _W_READ_WAIT_NS, _W_RPOS, _W_SPACE_WAITERS,
                                        _W_WAKE_BROKEN, _W_WAKE_FD, _W_WAKE_INODE, _W_WAKE_PID, _W_WAKE_TOKEN,
                                        RingClosedError, _ringfast, track_pid)
from elastream.ipc._sync import Futex, WakePipe, open_wake_writer, poke
from elastream.ipc.arrivals import ArrivalPredictor

if TYPE_CHECKING:
    from elastream.ipc.ring import SharedRing

_MAX_SLEEP = 0.05         # s: cap of one consumer sleep, so liveness checks run while idle
_SPACE_SLEEP = 0.01       # s: cap of one producer sleep on a full ring
_SPIN = 50e-6             # s of polling before sleeping (a futex wake costs a context switch)
_POLL_DUTY = 0.1          # hybrid polling: at most this fraction of the gap between records is spent polling

_FUTEX = Futex()
_PID = track_pid(globals())
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


class ReadWaiter:
    """Arms and disarms a ring consumer's announced sleep for a poller thread (see :meth:`SharedRing.read_waiter`)."""

    __slots__ = ("ring",)

    def __init__(self, ring: SharedRing):
        self.ring = ring

    def arm(self) -> int | None:
        """Announce the consumer as sleeping; the fd a producer's wake-up makes readable (None: poll instead)."""
        return self.ring._arm_read_wake()

    def disarm(self) -> None:
        """Withdraw the announcement; consume the wake-up bytes."""
        self.ring._disarm_read_wake()


class RingWaiting:
    """Waiting and waking for :class:`~elastream.ipc.ring.SharedRing` (a mixin; see the module docstring)."""

    def _init_waiting(self) -> None:
        """This handle's wake-up channels and wait bookkeeping (the constructor calls it once)."""
        self._wake_writer: tuple[int, int] = (0, -1)   # (consumer token, write fd of its wake pipe)
        self._wake_lock = threading.Lock()
        self._wake_pipe: WakePipe | None = None        # the consumer's, created when it claims the ring
        self._arrivals = ArrivalPredictor(_POLL_DUTY)
        self._wait_t0 = self._wait_t1 = 0.0        # the last wait, settled at the start of the next one
        self._poll: tuple[float, Any] | None = None  # (start, result) of the last polling window
        self._seen_ns = 0                          # publish stamp of the last record a wait saw

    # -- the consumer: blocking reads and the poller's waiter --------------------------------------
    def _read_waiting(self, max_records: int, timeout: float | None, views: bool) -> list:
        deadline = None if timeout is None else time.monotonic() + timeout

        def attempt() -> list:
            return self._try_read(max_records, views)

        try:
            while True:
                records = attempt()
                if records:
                    return records
                if self.at_eof:
                    return []
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"ring {self.name}: nothing to read within {timeout} s")
                self._check_open()
                if not self._readable():
                    # polls by reading, so the records come straight out of the wait (its code warm from polling)
                    records = self._wait_data(remaining, recheck=False, attempt=attempt, read=(max_records, views))
                    if isinstance(records, list) and records:
                        return records
        except (ValueError, OSError):           # the mapping or the wake pipe went: closed by another thread
            if self._closed:
                raise RingClosedError(f"ring {self.name} was closed while reading") from None
            raise

    def wait_readable(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`try_read` can make progress or the stream has ended; False on timeout.

        ``timeout=0`` is a non-blocking probe. Sleeps on the wake pipe (or a futex); never spins for long.
        """
        self._check_open()
        if self._readable():
            return True
        if timeout is not None and timeout <= 0:
            return False
        try:
            return bool(self._wait_data(timeout, recheck=True))
        except (ValueError, OSError):           # as in read()
            if self._closed:
                raise RingClosedError(f"ring {self.name} was closed while waiting") from None
            raise

    def read_waiter(self) -> ReadWaiter:
        """A waiter for a poller thread (:class:`~elastream.runtime.poller.Waiter`): it sleeps on this
        consumer's wake pipe until a producer publishes (or closes) instead of re-checking on a timer."""
        return ReadWaiter(self)

    def _arm_read_wake(self) -> int | None:
        """Announce a sleeping consumer; the wake pipe's read end, or None when producers cannot reach it."""
        with self._consumer_lock:
            pipe = self._wake_pipe
            if self._closed or pipe is None or self._token_pid != _PID or self._q[_W_WAKE_BROKEN]:
                return None
            self._atomic.store(_W_DATA_WAITERS * 8, 1)   # a full barrier: the caller's re-check comes after it
            return pipe.r

    def _disarm_read_wake(self) -> None:
        with self._consumer_lock:
            if self._closed:
                return
            self._q[_W_DATA_WAITERS] = 0                 # a racing waker's byte only ends a later sleep early
            if self._wake_pipe is not None:
                self._wake_pipe.drain()

    # -- the consumer's wait -----------------------------------------------------------------------
    def _wait_data(self, timeout: float | None, recheck: bool, attempt: Any = None,
                   read: tuple[int, bool] | None = None) -> Any:
        """The consumer waits for a publish: a short poll, a hybrid poll near the expected arrival, then sleep.

        ``attempt`` (default: is anything readable?) is what the polls call;
        its truthy result is returned (a reader passes its read, so records
        come straight out of the poll) with ``read`` = its (max_records,
        views), False on timeout. Announcing is a flag
        the consumer sets with a full barrier and a waker clears just before
        it wakes, so nothing runs on the consumer's side between a wake-up and
        its next read (the first code after a sleep is the slow part of a
        wake-up). Every clear is followed by a wake, so a cleared announcement
        never leaves the consumer asleep with data ready.
        """
        self._settle_last_wait()
        t0 = self._wait_t0 = time.monotonic()
        deadline = None if timeout is None else time.monotonic() + timeout
        predicate = attempt or self._readable
        try:
            spin_end = t0 + _SPIN
            while time.monotonic() < spin_end:
                if got := predicate():
                    return self._seen(got)
            can_sleep = _FUTEX.available or self._wake_pipe is not None
            plan = self._arrivals.plan(time.monotonic()) if can_sleep else None
            if plan is not None and (got := self._hybrid_poll(plan, deadline, predicate, read)):
                return self._seen(got)
            while not self._closed:
                remaining = _MAX_SLEEP if deadline is None else min(_MAX_SLEEP, deadline - time.monotonic())
                if remaining <= 0:
                    return predicate()
                if not can_sleep:
                    time.sleep(min(remaining, 1e-3))             # no wake-up channel: capped polling
                elif read is not None and (napped := self._nap_in_c(remaining, read)) is not None:
                    return self._seen(napped or True)            # the records, or: look again
                elif self._sleep_announced(remaining):
                    return self._seen(True)
                if not recheck:
                    return self._seen(True)
                if got := predicate():
                    return self._seen(got)
            return False
        finally:
            self._wait_t1 = time.monotonic()

    def _seen(self, got: Any) -> Any:
        """Data arrived: note when it was published (the predictor learns it at the next wait); return ``got``."""
        with self._consumer_lock:                     # not once close() has unmapped the segment
            if not self._closed:
                self._seen_ns = self._q[_W_LAST_PUBLISH_NS]
        return got

    def _settle_last_wait(self) -> None:
        """The last wait's bookkeeping, done at the start of the next one: off the path from data to caller."""
        if self._seen_ns:
            self._arrivals.arrived(self._seen_ns / 1e9)
            self._seen_ns = 0
        if self._closed:
            return
        q, t_end = self._q, self._wait_t1 or time.monotonic()
        if self._poll:
            t_poll, got = self._poll
            self._poll, hit = None, bool(got)
            self._arrivals.polled(hit)
            q[_W_READ_POLL_NS] += int(max(0.0, t_end - t_poll) * 1e9)
            q[_W_POLL_WINDOWS] += 1
            q[_W_POLL_HITS] += hit
        if self._wait_t1:
            q[_W_READ_WAIT_NS] += int((self._wait_t1 - self._wait_t0) * 1e9)
            self._wait_t1 = 0.0

    def _sleep_announced(self, seconds: float) -> bool | None:
        """Announce, re-check, sleep on the wake pipe (or futex) for at most ``seconds``.

        True: data was there before sleeping; None: a producer's wake-up ended
        the sleep (or it cannot tell: the futex); False: the time ran out.
        """
        # close() unmaps holding the consumer lock, after waking this sleep: a reader it woke that came back
        # here unlocked could announce into the unmapped segment (a crash under the ring tests, seen once).
        with self._consumer_lock:
            if self._closed:
                return None                           # look again: the caller finds the ring closed
            q = self._q
            self._atomic.store(_W_DATA_WAITERS * 8, 1)    # announce (a full barrier) ...
            seq = q[_W_DATA_SEQ]
            pipe = self._wake_pipe
            on_pipe = pipe is not None and not q[_W_WAKE_BROKEN]
            address = None if on_pipe else self._atomic.address(_W_DATA_SEQ * 8)
        if self._readable():                          # ... then re-check: no lost wake-up (unlocked, as it may
            return True                               # take the lock to skip a stalled writer's record)
        if on_pipe:
            return None if pipe.wait(seconds) else False
        _FUTEX.wait(address, seq, seconds)
        return None

    def _hybrid_poll(self, plan: tuple[float, float], deadline: float | None, predicate: Any,
                     read: tuple[int, bool] | None = None) -> Any:
        """Sleep (announced) until just before the expected arrival, then poll unannounced up to ``plan[1]``.

        While the consumer polls, producers see no announcement and skip the
        wake-up syscall; the predictor keeps the window within its duty share
        of the gap (:mod:`elastream.ipc.arrivals`). With the C path the window
        is one call that also delivers (``read``: max_records and views, as
        :meth:`_read_waiting` passes them). Returns ``predicate()``'s truthy
        result (the records), or False.
        """
        arrivals, clock = self._arrivals, time.monotonic   # the clock of the publish stamps
        start, stop = plan
        if deadline is not None:
            stop = min(stop, deadline)
        wake_at = arrivals.sleep_until(start)
        nap = wake_at - clock()
        if nap > 0:
            # a nap in Python, not in poll_read: the Python that runs after it (the read below, this loop)
            # warms what the delivery and the way back to the caller touch; after a C nap both ran cold and
            # a hit took ~45 us from publish to return instead of ~20
            slept = self._sleep_announced(nap)
            if slept:
                return True
            now = clock()
            if slept is False or now > wake_at:       # learn how late timed sleeps end (a wake-up after the
                arrivals.woke(wake_at, now)           # planned end counts too: the timer had not fired yet)
            if got := predicate():                    # woken by a producer, or the sleep overshot the window
                return got
        q = self._q
        q[_W_DATA_WAITERS] = 0                        # unannounced: a racing waker's byte only ends a later sleep
        t_poll = clock()
        got = self._poll_in_c(stop, read) if self._fast else None
        if got is None:                               # the Python loop (no C path, or it handed over)
            got = False
            while clock() < stop and not self._closed:
                if got := predicate():
                    break
                _yield()                              # a producer woken on this CPU runs at once, not after us
        self._poll = (t_poll, got)                  # counted at the next wait (or statistics()), ending with it
        return got

    def _nap_in_c(self, seconds: float, read: tuple[int, bool]) -> Any:
        """The reader's announced sleep as one ``_ringfast.poll_read`` call that delivers on waking.

        Returns the records, False (nothing: timed out, or woken early), or None: use :meth:`_sleep_announced`.
        """
        fd = self._nap_fd() if self._fast else None
        if fd is None:
            return None
        return self._poll_in_c(0.0, read, fd, time.monotonic() + seconds)

    def _nap_fd(self) -> int | None:
        """The wake pipe's read end when producers wake this consumer through it (not the futex)."""
        pipe = self._wake_pipe
        return None if pipe is None or self._q[_W_WAKE_BROKEN] else pipe.r

    def _poll_in_c(self, stop: float, read: tuple[int, bool] | None, nap_fd: int = -1, nap_until: float = 0.0) -> Any:
        """``_ringfast.poll_read``: nap on ``nap_fd`` until ``nap_until``, then poll until ``stop``.

        Returns the records (or True when only looking), False when nothing
        came, None when the general (Python) path must take over.
        """
        with self._consumer_lock:
            if self._closed or self._pending or self._views_out or self._held is not None or not self._token:
                return None
            max_records, views = read if read is not None else (0, False)
            out: list = []
            state, scan, records = _ringfast.poll_read(
                self._base, self._data, self._cap, self._salt, self._scan, max_records, out, self._expected_seq,
                self._buf if views else None, self._views_out if views else None, int(stop * 1e9), nap_fd,
                int(nap_until * 1e9))
            if state != 1:
                return None if state == 2 else False
            if not records:
                return True
            self._scan = scan
            if views:
                self._held = self._head               # viewed records keep their space until release_views()
            else:
                self._publish_head(scan)
            return out

    # -- producers: waiting for space, waking the consumer ----------------------------------------
    def _wait_space(self, size: int, timeout: float | None) -> bool:
        """A producer waits until ``size`` bytes fit: a short poll, then a futex sleep on the read cursor.

        The producer announces itself (a counter, with a full barrier), re-checks, and sleeps on the low 32
        bits of the read cursor it saw; the kernel compares them on entry, so a move of the cursor that the
        re-check missed (the consumer publishes it with a plain store and then reads the counter) makes the
        wait return at once — the consumer's side needs no atomic instruction. Sleeps are capped at 10 ms.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        spin_end = time.perf_counter() + _SPIN
        while time.perf_counter() < spin_end:
            if self._fits(size):
                return True
        backoff = 10e-6
        while not self._closed:
            remaining = _SPACE_SLEEP if deadline is None else min(_SPACE_SLEEP, deadline - time.monotonic())
            if remaining <= 0:
                return self._fits(size)
            if _FUTEX.available:
                self._atomic.fetch_add(_W_SPACE_WAITERS * 8, 1)   # announce, with a full barrier ...
                try:
                    seen = self._q[_W_RPOS]
                    if self._fits(size):                          # ... then re-check
                        return True
                    _FUTEX.wait(self._atomic.address(_W_RPOS * 8), seen, remaining)
                finally:
                    if not self._closed:
                        self._atomic.fetch_add(_W_SPACE_WAITERS * 8, -1)
            else:
                time.sleep(min(backoff, remaining))                # capped exponential back-off
                backoff = min(backoff * 2, 1e-3)
            if self._closed or self._fits(size):
                return not self._closed
        return False

    def _wake_consumer(self, force: bool = False) -> None:
        """After a publish: wake the consumer if it announced that it sleeps (the common case is one load)."""
        q = self._q
        if not (q[_W_DATA_WAITERS] or force):
            return
        # Clear the announcement, then wake. A plain store is enough: our publish (a CAS) is globally visible
        # before we read the flag, so a consumer whose fresh announcement this overwrites sees the record in
        # its re-check; and every clear is followed by a wake-up (the pipe keeps it until the next wait).
        q[_W_DATA_WAITERS] = 0
        token = q[_W_WAKE_TOKEN]
        if token and not q[_W_WAKE_BROKEN]:
            if self._wake_writer[0] != token:
                self._open_wake_writer(token)
            if self._wake_writer[0] == token and poke(self._wake_writer[1]):
                return
        if _FUTEX.available:
            self._atomic.fetch_add(_W_DATA_SEQ * 8, 1)
            _FUTEX.wake(self._atomic.address(_W_DATA_SEQ * 8), 1 << 30)

    def _open_wake_writer(self, token: int) -> None:
        q = self._q
        with self._wake_lock:
            if self._wake_writer[0] == token:
                return
            self._drop_wake_writer()
            fd = open_wake_writer(q[_W_WAKE_PID], q[_W_WAKE_FD], q[_W_WAKE_INODE])
            if fd is None:
                if q[_W_WAKE_TOKEN] == token:
                    q[_W_WAKE_BROKEN] = 1          # this producer cannot reach the pipe: everyone uses the futex
                return
            self._wake_writer = (token, fd)

    def _drop_wake_writer(self) -> None:
        token, fd = self._wake_writer
        self._wake_writer = (0, -1)
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
