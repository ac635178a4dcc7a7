"""The ring's producer side: registration, the CAS reservation, the append, the wrap-around flush (TurboStream §IV).

Role: everything a producer does to put a record into a
:class:`~elastream.ipc.ring.SharedRing` — join and leave
(:meth:`~RingProducer.register_producer`, :meth:`~RingProducer.close_producer`),
append a record (Fig. 5a/5c) by reserving space with a compare-and-swap on the
shared write cursor (Fig. 5e: never over unconsumed data), filling it and
publishing its status last, and, when the record does not fit before the end
of the lap, reserving the rest of the lap too and marking it with a FLUSH
record (Fig. 5d). The common append is one C call
(``_ringfast.try_write``), inlined in :meth:`~RingProducer.try_write_batch`;
the Python path here is the whole algorithm and handles what C declines.

Threading and process model: any number of producer threads in any number of
processes, each writing under a registered id; one id is used by one thread
at a time (a per-id lock within a handle, and ``_writing`` makes the C append
decline an id a thread is inside the Python path for). The C append holds the
GIL from reservation to publish. Nothing is locked between processes: the
write cursor is claimed by CAS and a record's status word is the only other
point of contact with the consumer (invariant 4 of :mod:`elastream.ipc.ring`).

:class:`RingProducer` is a mixin of :class:`~elastream.ipc.ring.SharedRing`:
its state is set by :meth:`~RingProducer._init_producer` from the ring's
constructor, and it calls the waiting mixin to wake the consumer and to wait
for space.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from elastream.ipc._ring_format import (_ALIGN, _CLOSED, _CTRL_WORDS, _HEAD, _M32, _OPEN, _P_ABANDONED, _P_ABORTED,
                                        _P_BYTES, _P_FLUSHES, _P_FULL, _P_PAYLOADS, _P_PID, _P_RECORDS,
                                        _P_RESERVING, _P_REWRITES, _P_SEQ, _P_START, _P_STATE, _P_WAIT_NS,
                                        _SLOT_WORDS, _U32, _W_DATA_WAITERS, _W_LAST_PUBLISH_NS, _W_PRODUCERS,
                                        _W_RPOS, _W_WPOS, FAILED, FLUSH, HEADER_BYTES, KIND_BATCH, KIND_SINGLE,
                                        READY, WRITING, RingClosedError, _record_size, _ringfast, track_pid)
from elastream.ipc._sync import process_identity

_PID = track_pid(globals())


class RingProducer:
    """The producer half of :class:`~elastream.ipc.ring.SharedRing` (a mixin; see the module docstring)."""

    def _init_producer(self) -> None:
        """This handle's producer state (the constructor calls it once)."""
        self._own: list[int] = []
        self._bound: dict[int, int] = {}
        self._locks: dict[int, threading.Lock] = {}
        # ids inside the general write path (C declines them); the last byte: closing (C declines everything)
        self._writing = bytearray(self._max_producers + 1)
        self._fast_cfg: tuple | None = None         # the C append's configuration for this handle's one producer
        self._fast_pid = 0                          # ... valid in this process only
        self._last_rejected = HEADER_BYTES + _ALIGN

    # -- public ------------------------------------------------------------------------------------
    def register_producer(self) -> int:
        """Join as a producer; returns its id (0, 1, ...). Writes of this handle default to it.

        Raises RuntimeError after end-of-stream or when ``max_producers`` are registered.
        """
        self._check_open()
        while True:
            word = self._q[_W_PRODUCERS]
            registered, closed = word & _M32, word >> 32
            if self._ended(registered, closed):
                raise RuntimeError(f"ring {self.name}: end of stream reached, no producer may join")
            if registered >= self._max_producers:
                raise RuntimeError(f"ring {self.name}: all {self._max_producers} producer slots are taken")
            if self._atomic.cas(_W_PRODUCERS * 8, word, word + 1):
                break
        pid = registered
        self._bind(pid)
        self._q[self._slot(pid) + _P_STATE] = _OPEN
        self._own.append(pid)
        self._configure_fast_write()
        return pid

    def close_producer(self, producer: int | None = None, *, aborted: bool = False) -> None:
        """Declare that ``producer`` (default: this handle's producer) will write no more (idempotent).

        May be called by a supervisor for a producer that died. When every
        registered (and every expected) producer has closed and the ring is
        drained, the consumer sees :attr:`at_eof`. ``aborted``: the stream was
        cut short (its writer was stopped), which the consumer reads as
        :attr:`aborted` — the end it sees is not the end of the data.
        """
        self._check_open()
        pid = self._resolve(producer)
        slot = self._slot(pid)
        if aborted:
            self._q[slot + _P_ABORTED] = 1  # before the close, which publishes it
        if not self._atomic.cas((slot + _P_STATE) * 8, _OPEN, _CLOSED):
            if self._q[slot + _P_STATE] == _CLOSED:
                return
            raise RuntimeError(f"ring {self.name}: producer {pid} was registered but never opened")
        while True:
            word = self._q[_W_PRODUCERS]
            if self._atomic.cas(_W_PRODUCERS * 8, word, word + (1 << 32)):
                break
        if pid in self._own:
            self._own.remove(pid)
        self._configure_fast_write()
        self._wake_consumer(force=True)

    def pending_bytes(self) -> int:
        """Bytes written (or reserved) and not yet consumed: what the ring holds now, records and padding."""
        q = self._q
        return q[_W_WPOS] - q[_W_RPOS]

    def try_write_batch(self, payloads: Sequence[Any], target: int = 0, *, producer: int | None = None) -> bool:
        """Append one batch record holding ``payloads`` (Fig. 5c); False if the ring is full.

        Each payload is a bytes-like object or a list/tuple of bytes-like parts
        (written back to back, read back as one payload — a codec's
        ``encode`` output). Non-blocking; one atomic reservation per call.

        Example: ``ring.try_write_batch([codec_output_1, codec_output_2], target=7)``
        """
        cfg = self._fast_cfg                    # the common append, inline: each Python call costs when cold
        if cfg is not None and producer is None and self._fast_pid == _PID and type(payloads) is list:
            status = _ringfast.try_write(cfg, KIND_BATCH, target, payloads)
            if status >= 0:
                if status:
                    self._wake_consumer()
                return True
            self._declined(status)
        elif self._fast_write(payloads, KIND_BATCH, target, producer):
            return True
        parts, lengths = _gather(payloads)
        if not lengths:
            raise ValueError(f"ring {self.name}: a batch needs at least one payload")
        return self._try_write(parts, lengths, KIND_BATCH, target, producer)

    def try_write(self, payload: Any, target: int = 0, *, producer: int | None = None) -> bool:
        """Append one single-payload record (Fig. 5a); False if the ring is full."""
        parts, lengths = _gather([payload])
        return self._try_write(parts, lengths, KIND_SINGLE, target, producer)

    def write_batch(self, payloads: Sequence[Any], target: int = 0, *, producer: int | None = None,
                    timeout: float | None = None) -> None:
        """Blocking :meth:`try_write_batch`: waits (without spinning) while the ring is full.

        Raises TimeoutError when ``timeout`` seconds pass first.
        """
        if self.try_write_batch(payloads, target, producer=producer):
            return
        parts, lengths = _gather(payloads)
        deadline = None if timeout is None else time.monotonic() + timeout
        pid = self._resolve(producer)
        size = _record_size(sum(lengths) + 4 * len(lengths))
        t0 = time.perf_counter()
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"ring {self.name}: still full after {timeout} s "
                                       f"(need {size} bytes, capacity {self._cap})")
                self._wait_writable_size(size, remaining)
                if self._try_write(parts, lengths, KIND_BATCH, target, pid):
                    return
        finally:
            self._add_slot(pid, _P_WAIT_NS, int((time.perf_counter() - t0) * 1e9))

    def wait_writable(self, timeout: float | None = None, nbytes: int | None = None) -> bool:
        """Wait until a record with ``nbytes`` of payload (default: the last write this handle was refused) fits.

        Returns False on timeout. Sleeps on a futex on the read cursor; never spins for long.
        """
        self._check_open()
        size = self._last_rejected if nbytes is None else _record_size(nbytes)
        return self._wait_writable_size(size, timeout)

    # -- ids and slots -----------------------------------------------------------------------------
    def _slot(self, producer: int) -> int:
        return _CTRL_WORDS + producer * _SLOT_WORDS

    def _add_slot(self, producer: int, field: int, delta: int) -> None:
        if not self._closed:
            self._q[self._slot(producer) + field] += delta

    def _ended(self, registered: int, closed: int) -> bool:
        return registered > 0 and closed == registered and closed >= self._expected

    def _resolve(self, producer: int | None) -> int:
        if producer is None:
            if len(self._own) == 1:
                return self._own[0]
            raise ValueError(f"ring {self.name}: this handle has {len(self._own)} producers registered; "
                             "pass producer=<id>")
        if not 0 <= producer < min(self._q[_W_PRODUCERS] & _M32, self._max_producers):
            raise ValueError(f"ring {self.name}: producer {producer} is not registered")
        return producer

    def _bind(self, producer: int) -> None:
        """Record this process as the one writing for ``producer`` (for the consumer's liveness checks)."""
        me = _PID
        if self._bound.get(producer) != me:
            pid, start = process_identity(me)
            slot = self._slot(producer)
            self._q[slot + _P_START] = start
            self._q[slot + _P_PID] = pid
            self._bound[producer] = me
            self._configure_fast_write()

    # -- the C append ------------------------------------------------------------------------------
    def _fast_write(self, payloads: Any, kind: int, target: int, producer: int | None) -> bool:
        """The common append in one C call (``_ringfast.try_write``); False: take the general path.

        The general path handles what the C call declines — wrap-around, a
        full ring, a record the consumer declared failed, unusual payloads, a
        producer id's first write in this process — and raises the errors;
        both write the same record format. No lock: the call holds the GIL
        from reservation to publish, and it declines while a thread of this
        handle is inside the general path for the same id (``_writing``).
        The batch writes inline this for the handle's one producer
        (:meth:`_configure_fast_write`).
        """
        if not self._fast or self._closed or type(payloads) is not list:
            return False
        own = self._own
        pid = own[0] if producer is None and len(own) == 1 else self._resolve(producer)
        if self._bound.get(pid) != _PID:
            return False
        status = _ringfast.try_write(self._producer_cfg(pid), kind, target, payloads)
        if status < 0:
            self._declined(status, pid)
            return False
        if status:
            self._wake_consumer()
        return True

    def _producer_cfg(self, pid: int) -> tuple:
        return self._base, self._data, self._cap, self._salt, _CTRL_WORDS + pid * _SLOT_WORDS, pid, self._writing

    def _configure_fast_write(self) -> None:
        """Cache the C append's configuration while this handle has exactly one producer, bound here."""
        own = self._own
        if self._fast and not self._closed and len(own) == 1 and self._bound.get(own[0]) == _PID:
            self._fast_cfg, self._fast_pid = self._producer_cfg(own[0]), _PID
        else:
            self._fast_cfg = None

    def _declined(self, status: int, pid: int | None = None) -> None:
        """The C append declined (-1) or lost its record to a failure declaration (-2, counted here)."""
        if status == -2:
            pid = self._own[0] if pid is None else pid
            self._q[_CTRL_WORDS + pid * _SLOT_WORDS + _P_REWRITES] += 1

    # -- the general append: reserve, fill, publish ----------------------------------------------
    def _try_write(self, parts: list, lengths: list[int], kind: int, target: int, producer: int | None) -> bool:
        # The hot path of every cross-process batch: rare cases (wrap, failure) live in their own methods.
        if self._closed:
            raise RingClosedError(f"ring {self.name} is closed")
        own = self._own
        pid = own[0] if producer is None and len(own) == 1 else self._resolve(producer)
        if not 0 <= target <= _M32:
            raise ValueError(f"target must be a task id in 0..{_M32}, got {target}")
        length = sum(lengths) + (4 * len(lengths) if kind == KIND_BATCH else 0)
        size = (HEADER_BYTES + length + _ALIGN - 1) & -_ALIGN
        cap = self._cap
        if size > cap >> 1:
            raise ValueError(f"ring {self.name}: a record of {size} bytes exceeds the largest record "
                             f"({cap // 2} bytes, half the capacity); use a bigger ring or smaller batches")
        lock = self._locks.get(pid) or self._locks.setdefault(pid, threading.Lock())
        with lock:
            if self._bound.get(pid) != _PID:
                self._bind(pid)
            self._writing[pid] = 1                      # the C path declines this id until we are done
            try:
                return self._write_locked(pid, size, kind, target, length, parts, lengths)
            finally:
                self._writing[pid] = 0

    def _write_locked(self, pid: int, size: int, kind: int, target: int, length: int, parts: list,
                      lengths: list[int]) -> bool:
        """Reserve, fill, publish (the caller holds the id's lock); False when the ring is full."""
        q, cas = self._q, self._atomic.cas
        slot = _CTRL_WORDS + pid * _SLOT_WORDS
        while True:
            reserved = self._reserve(slot, size)
            if reserved is None:
                self._last_rejected = size
                q[slot + _P_FULL] += 1
                return False
            w, pad = reserved
            status_word = self._fill(w, pad, slot, pid, kind, target, length, parts, lengths)
            # publish: the status is written last, by CAS (the consumer may have declared it failed)
            if cas(status_word * 8, WRITING, READY):
                break
            q[slot + _P_REWRITES] += 1
        q[_W_LAST_PUBLISH_NS] = time.monotonic_ns()
        q[slot + _P_SEQ] += 1
        q[slot + _P_RECORDS] += 1
        q[slot + _P_PAYLOADS] += len(lengths)
        q[slot + _P_BYTES] += length
        if q[_W_DATA_WAITERS]:                          # one load unless the consumer sleeps
            self._wake_consumer()
        return True

    def _reserve(self, slot: int, size: int) -> tuple[int, int] | None:
        """CAS the write cursor forward by ``size`` (plus the rest of the lap if it does not fit, Fig. 5d).

        Returns ``(old cursor, padding)`` or None when the space is not free (Fig. 5e).
        """
        q, cap, cas = self._q, self._cap, self._atomic.cas
        q[slot + _P_RESERVING] = 1
        while True:
            w = q[_W_WPOS]
            tail = cap - w % cap
            pad = 0 if size <= tail else tail
            end = w + pad + size
            if end - q[_W_RPOS] > cap:
                q[slot + _P_RESERVING] = 0
                return None
            if cas(_W_WPOS * 8, w, end):
                return w, pad

    def _fill(self, w: int, pad: int, slot: int, producer: int, kind: int, target: int, length: int,
              parts: list, lengths: list[int]) -> int:
        """Write the flush marker (if any), the header (status WRITING) and the payload; return the status word."""
        q, buf, data, salt = self._q, self._buf, self._data, self._salt
        pos = w + pad
        start = data + pos % self._cap
        header_written = False
        try:
            if pad:
                q[slot + _P_FLUSHES] += 1
                self._write_flush(w, pad, producer)
            _HEAD.pack_into(buf, start, WRITING, length, target, q[slot + _P_SEQ] & _M32, producer, kind)
            q[(start >> 3) + 3] = pos ^ salt          # the tag last: now the header is valid (invariant 3)
            header_written = True
            q[slot + _P_RESERVING] = 0
            at = start + HEADER_BYTES
            if kind == KIND_BATCH:
                pack_length = _U32.pack_into
                for part, n in zip(parts, lengths):
                    pack_length(buf, at, n)
                    at += 4
                    for piece in part:
                        end = at + len(piece)
                        buf[at:end] = piece
                        at = end
            else:
                for piece in parts[0]:
                    end = at + len(piece)
                    buf[at:end] = piece
                    at = end
        except BaseException:
            self._abandon(w, pad, start, pos, slot, producer, kind, target, length, header_written)
            raise
        return start >> 3

    def _write_flush(self, w: int, pad: int, producer: int) -> None:
        """Mark the rest of the lap, from ``w``, as skipped (Fig. 5d); a tail shorter than a header is implied."""
        if pad >= HEADER_BYTES:
            at = self._data + w % self._cap
            _HEAD.pack_into(self._buf, at, FLUSH, pad - HEADER_BYTES, 0, 0, producer, 0)
            self._q[(at >> 3) + 3] = w ^ self._salt

    def _abandon(self, w: int, pad: int, start: int, pos: int, slot: int, producer: int, kind: int, target: int,
                 length: int, header_written: bool) -> None:
        """A write failed midway: leave a valid FAILED header so the consumer skips the reserved space at once."""
        q = self._q
        q[slot + _P_ABANDONED] += 1
        self._write_flush(w, pad, producer)
        if not header_written:
            _HEAD.pack_into(self._buf, start, FAILED, length, target, q[slot + _P_SEQ] & _M32, producer, kind)
            q[(start >> 3) + 3] = pos ^ self._salt
        else:
            self._atomic.cas(start, WRITING, FAILED)
        q[slot + _P_RESERVING] = 0
        self._wake_consumer()

    def _fits(self, size: int) -> bool:
        q, cap = self._q, self._cap
        w = q[_W_WPOS]
        tail = cap - w % cap
        return w + (0 if size <= tail else tail) + size - q[_W_RPOS] <= cap

    def _wait_writable_size(self, size: int, timeout: float | None) -> bool:
        if self._fits(size):
            return True
        if timeout is not None and timeout <= 0:
            return False
        return self._wait_space(size, timeout)


def _gather(payloads: Iterable[Any]) -> tuple[list[list[Any]], list[int]]:
    """Each payload as a list of byte-format parts, and its length; validated before any space is reserved."""
    parts: list[list[Any]] = []
    lengths: list[int] = []
    for payload in payloads:
        kind = type(payload)
        if kind is bytes:
            parts.append([payload])
            lengths.append(len(payload))
            continue
        if kind is list and all(type(piece) is bytes for piece in payload):   # a codec's output
            parts.append(payload)
            lengths.append(sum(map(len, payload)))
            continue
        pieces = payload if isinstance(payload, (list, tuple)) else (payload,)
        views, n = [], 0
        for piece in pieces:
            if type(piece) is not bytes:
                try:
                    mv = memoryview(piece)
                except TypeError:
                    raise TypeError(f"ring payloads must be bytes-like (or lists of them), got "
                                    f"{type(piece).__name__}") from None
                if mv.format != "B" or mv.ndim != 1:
                    mv = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
                piece = mv
            views.append(piece)
            n += len(piece)
        if n > _M32:
            raise ValueError(f"payload of {n} bytes is larger than a record can hold")
        parts.append(views)
        lengths.append(n)
    return parts, lengths
