"""The ring's consumer side: the claim, the sliding window (Fig. 5b), delivery, failed and stalled records.

Role: everything the one consumer of a :class:`~elastream.ipc.ring.SharedRing`
does to take records out — claim the consumer role through a token in the
header (taking over a dead consumer's claim), scan from the read position
and deliver consecutive READY records (the common case is one C call,
``_ringfast.read_ready``), pass records still being written and come back to
them (the window's left side, :class:`~elastream.ipc._ring_format._Pending`)
while keeping each producer's records in order (invariant 5, checked through
the per-producer sequence numbers: ``sequence_errors``), skip records whose
writer died or stalled and reserved regions that never got a header, hand
out payloads as copies or as views into the ring (``try_read_views``, the
one-copy path of §IV), and move the read cursor to free space (Fig. 5e).
The blocking reads wait through the waiting mixin
(:mod:`elastream.ipc._ring_waiting`).

Threading and process model: one consumer handle at a time per ring, in any
process; its methods may be called from any thread of that process, and every
one that touches the window runs under the handle's ``_consumer_lock``
(``close()`` takes it before unmapping, so no read runs on a dead mapping).
The consumer stores the read cursor with a plain store (only it writes it)
and marks records READ; it meets producers only at record status words, by
CAS, when it declares a record FAILED.

:class:`RingConsumer` is a mixin of :class:`~elastream.ipc.ring.SharedRing`:
its state is set by :meth:`~RingConsumer._init_consumer` from the ring's
constructor.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from elastream.ipc._ring_format import (_ALIGN, _LIVENESS_PERIOD, _M32, _OPEN, _P_ABORTED, _P_PID, _P_RESERVING,
                                        _P_START, _P_STATE, _REST, _U32, _W_BYTES_READ, _W_CONSUMER_PID,
                                        _W_CONSUMER_START, _W_CONSUMER_TOKEN, _W_EMPTY_RECOVERIES, _W_FAILED_SKIPPED,
                                        _W_MAX_OCCUPANCY, _W_PAYLOADS_READ, _W_PRODUCERS, _W_RECORDS_READ, _W_RPOS,
                                        _W_SEQUENCE_ERRORS, _W_SPACE_WAITERS, _W_WAKE_FD, _W_WAKE_INODE,
                                        _W_WAKE_PID, _W_WAKE_TOKEN, _W_WPOS, FAILED, FLUSH, HEADER_BYTES,
                                        KIND_SINGLE, READ, READY, WRITING, _Pending, _record_size, _ringfast,
                                        track_pid)
from elastream.ipc._ring_segment import _release_views
from elastream.ipc._ring_waiting import _FUTEX
from elastream.ipc._sync import WakePipe, is_process_alive, process_identity

_PID = track_pid(globals())


class RingConsumer:
    """The consumer half of :class:`~elastream.ipc.ring.SharedRing` (a mixin; see the module docstring)."""

    def _init_consumer(self) -> None:
        """This handle's consumer state (the constructor calls it once; the role is claimed on the first read)."""
        self._consumer_lock = threading.Lock()
        self._token = 0
        self._token_pid = 0
        self._head = self._scan = 0
        self._pending: list[_Pending] = []
        self._expected_seq: dict[int, int] = {}
        self._empty_pos = -1
        self._empty_since = self._empty_next_check = 0.0
        self._lone_pos, self._lone_next_check = -1, 0.0   # a lone WRITING record at the scan position
        self._views_out: list[memoryview] = []   # payload views handed out by read_views
        self._held: int | None = None             # the read cursor may not pass this while views are out

    # -- public ------------------------------------------------------------------------------------
    def try_read(self, max_records: int = 64) -> list[tuple[int, bytes]]:
        """Consume up to ``max_records`` records; returns ``(target, payload)`` per payload. Non-blocking.

        Payloads are copies (``bytes``). A batch record yields all its payloads.
        Records of different producers may come out of reservation order; one
        producer's records never do.
        """
        return self._try_read(max_records, views=False)

    def try_read_views(self, max_records: int = 64) -> list[tuple[int, memoryview]]:
        """:meth:`try_read` without the copy: each payload is a read-only view into the ring.

        TurboStream's one-copy path (§IV): the producer's write is the only
        copy, and the consumer decodes straight from shared memory. The views
        stay valid, and their space stays reserved (producers cannot reuse it),
        until :meth:`release_views` or the next read of any kind; then they are
        released, and using one raises ValueError. Anything made from a view
        without copying (a slice, ``numpy.frombuffer``) would then see reused
        space: copy what must outlive the next read.

        Example: ``[(target, view)] = ring.try_read_views(1); header = bytes(view[:24]); ring.release_views()``
        """
        return self._try_read(max_records, views=True)

    def read(self, max_records: int = 64, timeout: float | None = None) -> list[tuple[int, bytes]]:
        """Blocking :meth:`try_read`: waits for data; returns ``[]`` only at end of stream.

        Raises TimeoutError when ``timeout`` seconds pass with nothing to read.
        """
        return self._read_waiting(max_records, timeout, views=False)

    def read_views(self, max_records: int = 64, timeout: float | None = None) -> list[tuple[int, memoryview]]:
        """Blocking :meth:`try_read_views` (see there for how long the views live)."""
        return self._read_waiting(max_records, timeout, views=True)

    def release_views(self) -> None:
        """Release the views of the last :meth:`read_views` and free their space for producers."""
        with self._consumer_lock:
            if self._views_out or self._held is not None:
                self._release_views_locked()

    def _try_read(self, max_records: int, views: bool) -> list:
        with self._consumer_lock:                   # checked under the lock: close() unmaps holding it
            self._check_open()
            self._claim_consumer()
            if self._views_out or self._held is not None:
                self._release_views_locked()
            return self._read_locked(max_records, views)

    def release_consumer(self) -> None:
        """Give up the consumer role so another handle (in any process) can take it over.

        Records already read stay marked READ and are not delivered again.
        """
        with self._consumer_lock:
            if self._views_out or self._held is not None:
                if self._token and self._token_pid == _PID and not self._closed:
                    self._release_views_locked()
                else:
                    self._drop_views()
            if self._token and self._token_pid == _PID and not self._closed:
                self._atomic.cas(_W_WAKE_TOKEN * 8, self._token, 0)
                self._atomic.cas(_W_CONSUMER_TOKEN * 8, self._token, 0)
            self._token = 0
            if self._wake_pipe is not None:
                self._wake_pipe.close()
                self._wake_pipe = None

    @property
    def at_eof(self) -> bool:
        """True once every producer has closed and every record has been consumed."""
        self._check_open()
        q = self._q
        word = q[_W_PRODUCERS]
        return self._ended(word & _M32, word >> 32) and q[_W_RPOS] == q[_W_WPOS]

    @property
    def aborted(self) -> bool:
        """True when a producer closed with ``aborted=True``: the stream was cut short, not ended."""
        self._check_open()
        q = self._q
        return any(q[self._slot(pid) + _P_ABORTED] for pid in range(min(q[_W_PRODUCERS] & _M32, self._max_producers)))

    def failed_producers(self) -> tuple[int, ...]:
        """Ids of producers that are still open but whose process has exited (for a supervisor)."""
        q = self._q
        dead = []
        for pid in range(min(q[_W_PRODUCERS] & _M32, self._max_producers)):
            slot = self._slot(pid)
            if q[slot + _P_STATE] == _OPEN and not is_process_alive(q[slot + _P_PID], q[slot + _P_START]):
                dead.append(pid)
        return tuple(dead)

    # -- the window --------------------------------------------------------------------------------
    def _claim_consumer(self) -> None:
        me = _PID
        if self._token and self._token_pid == me:
            return
        q, token = self._q, secrets.randbits(62) | 1
        while True:
            current = q[_W_CONSUMER_TOKEN]
            if current == 0:
                if self._atomic.cas(_W_CONSUMER_TOKEN * 8, 0, token):
                    break
                continue
            owner_pid, owner_start = q[_W_CONSUMER_PID], q[_W_CONSUMER_START]
            if owner_pid and not is_process_alive(owner_pid, owner_start):
                if self._atomic.cas(_W_CONSUMER_TOKEN * 8, current, token):
                    break
                continue
            raise RuntimeError(f"ring {self.name} already has a consumer (pid {owner_pid or 'unknown'}); "
                               "a ring has exactly one")
        pid, start = process_identity(me)
        q[_W_CONSUMER_START], q[_W_CONSUMER_PID] = start, pid
        self._token, self._token_pid = token, me
        if self._wake_pipe is not None:            # inherited across fork: our copies of the parent's fds
            self._wake_pipe.close()
            self._wake_pipe = None
        try:
            pipe = WakePipe()
        except OSError:
            pipe = None
        if pipe is not None:
            q[_W_WAKE_PID], q[_W_WAKE_FD], q[_W_WAKE_INODE] = pid, pipe.r, pipe.inode
            q[_W_WAKE_TOKEN] = token              # last: producers read the token first
            self._wake_pipe = pipe
        self._head = self._scan = q[_W_RPOS]
        self._pending = []
        self._expected_seq = {}
        self._empty_pos = -1

    def _read_locked(self, max_records: int, views: bool = False) -> list[tuple[int, Any]]:
        """One pass of the sliding window (Fig. 5b): the left side, then the right side from the scan position."""
        q, cap, data, salt = self._q, self._cap, self._data, self._salt
        out: list[tuple[int, bytes]] = []
        records = failed = 0
        w = q[_W_WPOS]
        blocked: set[int] = set()
        if self._pending:                       # the window's left side: records we had to pass
            records, failed = self._read_left(out, blocked, max_records, views)
        scan = self._scan
        if self._fast and not blocked and scan < w:  # the common case in one C call; it stops where the loop starts
            scan, delivered, seq_errors = _ringfast.read_ready(self._base, data, cap, salt, scan, w,
                                                               max_records - records, out, self._expected_seq,
                                                               self._buf if views else None)
            records += delivered
            if seq_errors:
                q[_W_SEQUENCE_ERRORS] += seq_errors
        while scan < w and records < max_records:  # the right side: never waits behind a WRITING record
            off = scan % cap
            tail = cap - off
            if tail < HEADER_BYTES:
                scan += tail                        # implied flush
                continue
            start = data + off
            word = start >> 3
            if q[word + 3] != scan ^ salt:          # reserved, header not written yet
                if self._empty_stalled(scan):
                    scan = self._skip_headerless(scan, w)
                    failed += 1
                    continue
                break
            status = q[word]
            if status == FLUSH:
                scan += tail
                continue
            length, target, seq, producer, kind = _REST.unpack_from(self._buf, start + 8)
            if status == READY and producer not in blocked:
                self._deliver(out, word, start, length, target, seq, producer, kind, views)
                records += 1
            elif status == WRITING or status == READY:
                self._pending.append(_Pending(scan, word, start, producer, length, target, seq, kind,
                                              time.monotonic()))
                blocked.add(producer)
            elif status == FAILED:
                failed += 1
            scan += (HEADER_BYTES + length + _ALIGN - 1) & -_ALIGN
        self._scan = scan
        if views and out:                       # viewed records keep their space until release_views()
            self._views_out.extend(payload for _, payload in out)
            self._held = self._head
        self._publish_head(self._pending[0].pos if self._pending else scan)
        if records:
            q[_W_RECORDS_READ] += records
            q[_W_PAYLOADS_READ] += len(out)
        if failed:
            q[_W_FAILED_SKIPPED] += failed
        return out

    def _read_left(self, out: list, blocked: set[int], max_records: int, views: bool) -> tuple[int, int]:
        """The window's left side: deliver the passed records now READY, drop FAILED ones, keep the rest.

        A producer with a record kept here is ``blocked``: none of its later
        records is delivered before it (invariant 5). Returns (records
        delivered, records failed). Runs only while records are pending.
        """
        q = self._q
        records = failed = 0
        now = time.monotonic()
        keep = []
        for e in self._pending:
            status = q[e.word]
            if status == WRITING and now >= e.next_check:
                status = self._check_writer(e, now)
            if status == READY and e.producer not in blocked and records < max_records:
                self._deliver(out, e.word, e.start, e.length, e.target, e.seq, e.producer, e.kind, views)
                records += 1
            elif status == FAILED:
                failed += 1
            else:
                keep.append(e)
                blocked.add(e.producer)
        self._pending = keep
        return records, failed

    def _publish_head(self, head: int) -> None:
        """Move the read cursor to ``head`` (held back by viewed records), freeing space (Fig. 5e)."""
        if self._held is not None:
            head = min(head, self._held)
        if head != self._head:
            q = self._q
            occupancy = q[_W_WPOS] - self._head
            if occupancy > q[_W_MAX_OCCUPANCY]:
                q[_W_MAX_OCCUPANCY] = occupancy
            self._head = head
            q[_W_RPOS] = head                       # frees the space ...
            if q[_W_SPACE_WAITERS] and _FUTEX.available:
                _FUTEX.wake(self._atomic.address(_W_RPOS * 8), 1 << 30)   # ... and wakes blocked producers

    def _release_views_locked(self) -> None:
        self._drop_views()
        self._publish_head(self._pending[0].pos if self._pending else self._scan)

    def _drop_views(self) -> None:
        """Release the views handed out (a later use raises instead of reading reused space)."""
        _release_views(self._views_out)
        self._held = None

    def _deliver(self, out: list, word: int, start: int, length: int, target: int, seq: int, producer: int,
                 kind: int, views: bool = False) -> None:
        buf = self._buf
        at = start + HEADER_BYTES
        if kind == KIND_SINGLE:
            out.append((target, buf[at:at + length] if views else buf[at:at + length].tobytes()))
        else:
            end = at + length
            while at < end:
                (n,) = _U32.unpack_from(buf, at)
                at += 4
                out.append((target, buf[at:at + n] if views else buf[at:at + n].tobytes()))
                at += n
        self._q[word] = READ
        self._q[_W_BYTES_READ] += length
        expected = self._expected_seq.get(producer)
        if expected is not None and seq != expected:
            self._q[_W_SEQUENCE_ERRORS] += 1
        self._expected_seq[producer] = (seq + 1) & _M32

    # -- writers that died or stalled --------------------------------------------------------------
    def _check_writer(self, e: _Pending, now: float) -> int:
        """A record is still WRITING: declare it failed if its producer died or it stalled (returns the status)."""
        e.next_check = now + _LIVENESS_PERIOD
        slot = self._slot(e.producer)
        q = self._q
        if now - e.first_seen < self._stall_timeout and is_process_alive(q[slot + _P_PID], q[slot + _P_START]):
            return WRITING
        if self._atomic.cas(e.word * 8, WRITING, FAILED):
            return FAILED
        return q[e.word]                         # it was published meanwhile

    def _empty_stalled(self, scan: int) -> bool:
        """The space at ``scan`` is reserved but has no header: is its writer gone?"""
        now = time.monotonic()
        if self._empty_pos != scan:
            self._empty_pos, self._empty_since, self._empty_next_check = scan, now, now + _LIVENESS_PERIOD
            return False
        if now < self._empty_next_check:
            return False
        self._empty_next_check = now + _LIVENESS_PERIOD
        if now - self._empty_since >= self._stall_timeout:
            return True
        # The writer is among the producers with a reservation in flight; skip only if all of them are dead.
        q, any_dead = self._q, False
        for pid in range(min(q[_W_PRODUCERS] & _M32, self._max_producers)):
            slot = self._slot(pid)
            if q[slot + _P_RESERVING]:
                if is_process_alive(q[slot + _P_PID], q[slot + _P_START]):
                    return False
                any_dead = True
        return any_dead

    def _skip_headerless(self, scan: int, w: int) -> int:
        """Skip from ``scan`` to the next valid header before ``w`` (or to ``w``)."""
        q, cap, data, salt = self._q, self._cap, self._data, self._salt
        self._q[_W_EMPTY_RECOVERIES] += 1
        self._empty_pos = -1
        pos = scan + _ALIGN
        while pos < w:
            off = pos % cap
            if cap - off >= HEADER_BYTES and q[((data + off) >> 3) + 3] == pos ^ salt:
                return pos
            pos += _ALIGN
        return w

    # -- is there anything to read? ----------------------------------------------------------------
    def _readable(self) -> bool:
        """Would try_read make progress (or has the stream ended)?"""
        if self._closed:
            return True
        with self._consumer_lock:
            self._claim_consumer()
            q, cap = self._q, self._cap
            if self._pending:
                now = time.monotonic()
                blocked: set[int] = set()
                for e in self._pending:
                    status = q[e.word]
                    if status == FAILED or (status == READY and e.producer not in blocked) or now >= e.next_check:
                        return True
                    blocked.add(e.producer)
            scan = self._scan
            w = q[_W_WPOS]
            if scan < w:
                off = scan % cap
                if cap - off < HEADER_BYTES:
                    return True
                word = (self._data + off) >> 3
                if q[word + 3] == scan ^ self._salt:
                    return q[word] != WRITING or self._lone_writing_due(scan, word, w)
                return self._empty_pos != scan or time.monotonic() >= self._empty_next_check
        return self.at_eof

    def _lone_writing_due(self, scan: int, word: int, w: int) -> bool:
        """The record at ``scan`` is WRITING: readable only if others follow it (the window passes it) or it
        is time to check that its writer lives (a read moves it to the window's left side, which does)."""
        if scan + _record_size(_U32.unpack_from(self._buf, (word << 3) + 8)[0]) < w:
            return True
        now = time.monotonic()
        if self._lone_pos != scan:
            self._lone_pos, self._lone_next_check = scan, now + _LIVENESS_PERIOD
            return False
        return now >= self._lone_next_check
