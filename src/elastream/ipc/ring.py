"""Shared-memory ring buffer between processes: TurboStream's OSRBuffer (§IV, Fig. 5).

Role: the transport of every stream that crosses a process boundary. Many
producers append records (each a batch of encoded tuples, Fig. 5c) to one
segment of ``multiprocessing.shared_memory``; one consumer reads them with the
sliding window of Fig. 5b. Nothing is locked: producers reserve space with an
atomic compare-and-swap on the shared write cursor, the consumer owns the read
cursor, and record status words are the only other points of contact.

Threading and process model
---------------------------
* The *owner* creates the segment (:meth:`SharedRing.create`) and is the only
  handle that unlinks it (on :meth:`~SharedRing.close`, on error, when it is
  garbage collected, or through the resource tracker if its process dies).
  Any process attaches by name (:meth:`SharedRing.attach`, or by unpickling a
  ring: handles pickle by name).
* *Producers*: any number of threads in any number of processes. Each calls
  :meth:`~SharedRing.register_producer` once (or is handed an id registered
  elsewhere) and writes under that id; one id is used by one thread at a time
  (a per-id lock enforces it within a handle). ``producers=N`` at creation
  says how many will register, so the stream cannot end before the last one
  has joined.
* *Consumer*: one handle at a time per ring, claimed on its first read through
  a token in the header (a dead consumer's claim can be taken over; records it
  already read stay marked READ). Its methods may be called from any thread of
  its process (a lock serialises them).
* :meth:`~SharedRing.close` must not race with other calls on the same handle.

Layout
------
A 512-byte control block (each hot word on its own cache line), then
``max_producers`` 128-byte producer slots (state, pid and start time,
sequence number, statistics), then the data area of ``capacity`` bytes. The
write and read cursors are absolute byte counts (they never wrap; ``cursor %
capacity`` is the offset, ``cursor // capacity`` the lap). A record is a
32-byte header — status (u64), payload length (u32), target task (u32),
per-producer sequence (u32), producer (u16), kind (u16), tag (u64) — and its
payload, 8-byte aligned (Fig. 5a). A batch record's payload is a run of
``u32 length + bytes`` items (Fig. 5c).

Invariants
----------
1. ``rpos <= start of every unconsumed record <= wpos`` and ``wpos - rpos <=
   capacity``: a producer whose record would overwrite unconsumed data does not
   write (Fig. 5e); ``try_write_batch`` returns False (back-pressure).
2. A record never straddles the end of the data area. The producer that finds
   the rest of the lap too short reserves it too and marks it with a FLUSH
   record (Fig. 5d); a tail shorter than a header is an implied flush.
3. A header is valid only when its tag word equals ``position XOR salt`` (a
   random 64-bit salt per ring), and the tag is written after the other header
   fields. So stale bytes from an earlier lap are never taken for a header, and
   the consumer can tell "reserved, header not yet written" apart.
4. Status moves WRITING → READY (producer, by CAS, after the payload is
   copied: the status is written last) → READ (consumer); or WRITING → FAILED,
   either by the producer abandoning a write on an exception or by the
   consumer declaring the writer dead or stalled, also by CAS. The CAS decides
   a race between a late producer and the consumer: if the consumer won, the
   producer writes the batch again in a fresh reservation, so a merely slow
   producer loses nothing.
5. Per-producer order: a producer's records are delivered in the order it wrote
   them. A producer publishes a record before it reserves its next one, so its
   records become READY in position order; the window delivers a READY record
   out of position order only past WRITING records of *other* producers (a
   producer with an undelivered record to the left is blocked), and every
   record carries its producer's sequence number, which the consumer checks
   (``statistics().sequence_errors`` counts violations; the tests require 0).

Failed records (the sliding window's limit)
-------------------------------------------
TurboStream skips a record that stays WRITING when the window reaches its
maximum size. Skipping on size alone would drop records of a producer that is
only slow, so here the window is bounded by *liveness and time*: the right
side may run ahead to the write cursor, and the left side skips a WRITING
record when its producer's process has exited (checked through
``/proc/<pid>/stat``: pid, start time, zombie state) or when the record has
been WRITING for ``stall_timeout`` seconds. A producer that died between its
reservation and its header write leaves a region with no valid header; once
every producer with a reservation in flight is dead (or after
``stall_timeout``) the consumer skips to the next valid header. A producer
stopped for longer than ``stall_timeout`` in the middle of a copy (``SIGSTOP``)
is the one case that can damage data: it resumes copying into space that may
have been reused, so keep ``stall_timeout`` far above any copy time.

Waiting
-------
Neither side spins for long: after a ~50 µs poll it announces itself in the
header and sleeps, and the other side makes a wake-up syscall only when a
sleeper has announced itself (one plain load otherwise).

* The consumer sleeps on its *wake pipe*: it creates a pipe when it claims the
  ring and publishes pid, fd number and inode in the header; a producer opens
  the write end once through ``/proc/<pid>/fd/<n>`` (checking the inode) and
  writes a byte. Nothing is passed at process start, so rings attached by
  name work, and a pipe woke a sleeping process about twice as fast as a
  shared futex here. If a producer cannot open the pipe (another pid
  namespace, no ``/proc``), it sets a flag and everyone uses a futex on a
  sequence word in the header instead.
* Producers blocked on a full ring sleep on a futex on the read cursor itself.
* Hybrid polling (:mod:`elastream.ipc.arrivals`): when records come at a
  steady pace, a waiting consumer sleeps (announced) until just before the
  next one is due, then polls unannounced — by reading, so the read path is
  warm — for a short window around it, yielding the CPU each round; producers
  stamp each publish with CLOCK_MONOTONIC so the schedule is learned from
  publish times. A window never takes more than 10% of the gap; irregular
  streams are not polled. ``RingStats.read_poll_s`` / ``poll_windows`` /
  ``poll_hits`` show what it costs and gains.
* Consumer sleeps are capped at 50 ms (liveness checks keep running while
  idle), producer sleeps at 10 ms. Without futex support waiting degrades to
  a capped exponential back-off (10 µs → 1 ms).

Fast path
---------
The common append (no wrap, room in the ring) and the common scan (consecutive
READY records) run as one C call each (:mod:`elastream.ipc._ringfast`, built
where a compiler exists): at low rates every write and read runs cold, and on a
VM cold code pays per page it touches. Everything else — wrap-around, a full
ring, failed or stalled records, the window's left side — stays here; the record
format is the same either way. ``read_views`` hands out payloads in place.

Memory ordering: x86-64 total store order for plain aligned 8-byte loads and
stores; every read-modify-write is an ``atomics`` operation (a full barrier).
See :mod:`elastream.ipc._sync`.
"""

from __future__ import annotations

import os
import secrets
import struct
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from elastream.errors import ElastreamError
from elastream.ipc._sync import (AtomicWords, BackgroundPrefault, Futex, WakePipe, allocate, attach_segment,
                                  is_process_alive, open_wake_writer, poke, prefault_head, process_identity)
from elastream.ipc.arrivals import ArrivalPredictor

try:                                   # the optional C hot path (setup.py builds it where a compiler exists)
    from elastream.ipc import _ringfast
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    _ringfast = None

__all__ = ["HEADER_BYTES", "RingClosedError", "RingStats", "SharedRing"]

# -- record format (Fig. 5a) ---------------------------------------------------------------------
HEADER_BYTES = 32
_ALIGN = 8
WRITING, READY, READ, FLUSH, FAILED = 1, 2, 3, 4, 5
STATUS_NAMES = {WRITING: "WRITING", READY: "READY", READ: "READ", FLUSH: "FLUSH", FAILED: "FAILED"}
KIND_SINGLE, KIND_BATCH = 1, 2
_HEAD = struct.Struct("<QIIIHH")     # status, length, target, seq, producer, kind (tag follows as a word)
_REST = struct.Struct("<IIIHH")      # the same without the status
_U32 = struct.Struct("<I")
_M32 = 0xFFFFFFFF

# -- control block: indices of 8-byte words ------------------------------------------------------
_MAGIC = 0x3152_4E49_5245_5345       # "ESERINR1"
_VERSION = 1
_W_MAGIC, _W_VERSION, _W_CAPACITY, _W_DATA_OFFSET, _W_MAX_PRODUCERS, _W_SALT, _W_EXPECTED, _W_STALL_US = range(8)
_W_CREATOR_PID, _W_CREATOR_START = 8, 9
_W_WPOS = 16                         # shared write cursor: CAS by producers
_W_RPOS = 24                         # read cursor: stored by the consumer only
_W_PRODUCERS = 32                    # registered | closed << 32, one CAS word
_W_CONSUMER_TOKEN, _W_CONSUMER_PID, _W_CONSUMER_START = 33, 34, 35
_W_DATA_SEQ, _W_DATA_WAITERS = 40, 41      # consumer sleeps here; producers wake it
_W_WAKE_TOKEN, _W_WAKE_PID, _W_WAKE_FD, _W_WAKE_INODE, _W_WAKE_BROKEN = 42, 43, 44, 45, 46  # its wake pipe
_W_SPACE_WAITERS = 49                      # producers sleeping on the read cursor (a futex)
_W_READ_POLL_NS, _W_POLL_WINDOWS, _W_POLL_HITS = 50, 51, 52   # the consumer's hybrid polling
_W_LAST_PUBLISH_NS = 53                    # CLOCK_MONOTONIC of the latest publish (the predictor's arrivals)
(_W_RECORDS_READ, _W_PAYLOADS_READ, _W_BYTES_READ, _W_FAILED_SKIPPED, _W_MAX_OCCUPANCY, _W_READ_WAIT_NS,
 _W_EMPTY_RECOVERIES, _W_SEQUENCE_ERRORS) = range(56, 64)
_CTRL_WORDS = 64
# producer slot: 16 words each, after the control block
_SLOT_WORDS = 16
(_P_STATE, _P_PID, _P_START, _P_RESERVING, _P_SEQ, _P_RECORDS, _P_PAYLOADS, _P_BYTES, _P_FULL, _P_FLUSHES,
 _P_WAIT_NS, _P_REWRITES, _P_ABANDONED, _P_ABORTED) = range(14)
_FREE, _OPEN, _CLOSED = 0, 1, 2

_LIVENESS_PERIOD = 0.02   # s between checks of a stuck writer's process
_MAX_SLEEP = 0.05         # s: cap of one consumer sleep, so liveness checks run while idle
_SPACE_SLEEP = 0.01       # s: cap of one producer sleep on a full ring
_SPIN = 50e-6             # s of polling before sleeping (a futex wake costs a context switch)
_POLL_DUTY = 0.1          # hybrid polling: at most this fraction of the gap between records is spent polling
_MIN_CAPACITY = 4096
PREFAULT_HEAD = 64 << 10  # bytes of the data area a new handle maps in before it returns (the rest: background)

_FUTEX = Futex()
_PID = os.getpid()
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
if _ringfast is not None:
    try:
        _ringfast.layout(_W_WPOS, _W_RPOS, _W_DATA_WAITERS, _P_RESERVING, _P_SEQ, _P_RECORDS, _P_PAYLOADS, _P_BYTES,
                         _W_BYTES_READ, _W_LAST_PUBLISH_NS, _W_RECORDS_READ, _W_PAYLOADS_READ, _W_SEQUENCE_ERRORS,
                         WRITING, READY, READ, KIND_BATCH)
    except TypeError:  # pragma: no cover - an extension built from an older source: the Python paths instead
        _ringfast = None


def _refresh_pid() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


class RingClosedError(ElastreamError):
    """An operation on a ring handle after :meth:`SharedRing.close`."""


@dataclass(frozen=True, slots=True)
class RingStats:
    """A snapshot of one ring's counters (all producers and the consumer, from any handle)."""

    capacity: int
    records_written: int
    payloads_written: int
    bytes_written: int
    records_read: int
    payloads_read: int
    bytes_read: int
    full_events: int              #: writes refused because the ring was full (back-pressure)
    flush_wraps: int              #: records that jumped to the start of the ring (Fig. 5d)
    failed_records_skipped: int   #: records (or header-less regions) the consumer skipped as failed
    abandoned_records: int        #: writes a producer gave up on an exception
    rewritten_records: int        #: writes repeated because the consumer had declared them failed
    empty_recoveries: int         #: reserved regions whose writer died before writing a header
    sequence_errors: int          #: per-producer order violations seen by the consumer (should be 0)
    max_occupancy: int            #: most bytes reserved and not yet released, seen by the consumer
    occupancy: int
    producers_registered: int
    producers_closed: int
    write_wait_s: float           #: producers' time blocked in write_batch / wait_writable (back-pressured)
    read_wait_s: float            #: consumer's time blocked in read / wait_readable (idle)
    read_poll_s: float = 0.0      #: ... of which polling near an expected arrival (on-CPU; hybrid polling)
    poll_windows: int = 0         #: polling windows opened by the consumer
    poll_hits: int = 0            #: ... in which the record arrived


class _Pending:
    """A record left of the consumer's scan position that is not yet consumed (Fig. 5b's left side)."""

    __slots__ = ("pos", "word", "start", "producer", "length", "target", "seq", "kind", "first_seen", "next_check")

    def __init__(self, pos: int, word: int, start: int, producer: int, length: int, target: int, seq: int,
                 kind: int, now: float):
        self.pos, self.word, self.start = pos, word, start
        self.producer, self.length, self.target, self.seq, self.kind = producer, length, target, seq, kind
        self.first_seen = now
        self.next_check = now + _LIVENESS_PERIOD


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


class SharedRing:
    """An OSRBuffer: a multi-producer, single-consumer ring of records in shared memory.

    Create with :meth:`create` (owner) or :meth:`attach`; see the module
    docstring for the process model, invariants and failure handling.

    Example::

        with SharedRing.create(1 << 16) as ring:
            me = ring.register_producer()
            assert ring.try_write_batch([b"a", b"bc"], target=3)
            ring.close_producer(me)
            assert ring.try_read() == [(3, b"a"), (3, b"bc")]
            assert ring.at_eof
    """

    # -- life cycle --------------------------------------------------------------------------------
    @classmethod
    def create(cls, capacity_bytes: int, name: str | None = None, *, producers: int | None = None,
               max_producers: int = 64, stall_timeout: float = 10.0, prefault: bool = True) -> SharedRing:
        """Create a ring with a data area of ``capacity_bytes`` (rounded up to 8); this handle owns it.

        ``producers``: how many producers will register (end-of-stream waits for
        all of them); ``stall_timeout``: seconds after which a record still
        WRITING is skipped even if its producer's process is alive. The
        segment's pages are allocated at once; ``prefault=False`` leaves them
        unmapped in this handle, for an owner that will neither write nor read
        (every handle that attaches maps them itself): ~1 ms instead of ~3 ms
        for 4 MB.

        Example: ``ring = SharedRing.create(2 << 20, producers=2)``
        """
        capacity = max(_MIN_CAPACITY, -(-int(capacity_bytes) // _ALIGN) * _ALIGN)
        if not 1 <= max_producers <= 0xFFFF:
            raise ValueError(f"max_producers must be in 1..65535, got {max_producers}")
        if producers is not None and not 0 <= producers <= max_producers:
            raise ValueError(f"producers={producers} must be in 0..max_producers ({max_producers})")
        if stall_timeout <= 0:
            raise ValueError(f"stall_timeout must be positive, got {stall_timeout}")
        data_offset = -(-(_CTRL_WORDS + max_producers * _SLOT_WORDS) * 8 // 4096) * 4096
        shm = shared_memory.SharedMemory(name=name or cls.new_name(), create=True, size=data_offset + capacity)
        try:
            q = shm.buf.cast("Q")
            try:
                pid, start = process_identity()
                q[_W_VERSION], q[_W_CAPACITY], q[_W_DATA_OFFSET] = _VERSION, capacity, data_offset
                q[_W_MAX_PRODUCERS], q[_W_SALT] = max_producers, secrets.randbits(62) | (1 << 63)
                q[_W_EXPECTED], q[_W_STALL_US] = producers or 0, int(stall_timeout * 1e6)
                q[_W_CREATOR_PID], q[_W_CREATOR_START] = pid, start
                q[_W_MAGIC] = _MAGIC
            finally:
                q.release()
            allocate(shm._fd, data_offset + capacity)   # noqa: SLF001 - the segment's own file
            job = _prefault(shm._mmap, data_offset) if prefault else None  # noqa: SLF001 - its own mapping
            try:
                return cls(shm.name, shm.buf, owner=shm, prefault_job=job)
            except BaseException:
                if job is not None:
                    job.cancel()
                raise
        except BaseException:
            shm.close()
            shm.unlink()
            raise

    @staticmethod
    def new_name() -> str:
        """A fresh segment name for :meth:`create` (so others can be told the name before it exists).

        Example: ``SharedRing.create(1 << 20, name=SharedRing.new_name())``
        """
        return f"esring_{secrets.token_hex(8)}"

    @classmethod
    def attach(cls, name: str) -> SharedRing:
        """Map the existing ring ``name`` (from any process); this handle does not own it.

        Example: ``ring = SharedRing.attach(owner.name)``
        """
        segment = attach_segment(name)
        job = _prefault(segment._mmap, _data_offset(segment.buf))  # noqa: SLF001
        try:
            return cls(name, segment.buf, segment=segment, prefault_job=job)
        except BaseException:
            job.cancel()
            segment.close()
            raise

    def __init__(self, name: str, buf: memoryview, *, owner: shared_memory.SharedMemory | None = None,
                 segment: Any = None, prefault_job: BackgroundPrefault | None = None):
        """Private: use :meth:`create` or :meth:`attach`."""
        q = buf.cast("Q")
        if len(q) < _CTRL_WORDS or q[_W_MAGIC] != _MAGIC or q[_W_VERSION] != _VERSION:
            q.release()
            raise ValueError(f"shared-memory segment {name!r} is not an elastream ring (version {_VERSION})")
        self.name = name
        self._owner = owner
        self._segment = segment
        self._buf = buf
        self._q = q
        self._atomic = AtomicWords(buf)
        self._base = self._atomic.address(0)
        self._fast = _ringfast is not None  # False: the Python paths alone (the tests run both)
        self._cap = q[_W_CAPACITY]
        self._data = q[_W_DATA_OFFSET]
        self._salt = q[_W_SALT]
        self._max_producers = q[_W_MAX_PRODUCERS]
        self._expected = q[_W_EXPECTED]
        self._stall_timeout = q[_W_STALL_US] / 1e6
        self._creator = (q[_W_CREATOR_PID], q[_W_CREATOR_START])
        self._closed = False
        self._unlinker = _Unlinker(owner, self._creator[0]) if owner is not None else None
        # producer side (this handle)
        self._own: list[int] = []
        self._bound: dict[int, int] = {}
        self._locks: dict[int, threading.Lock] = {}
        # ids inside the general write path (C declines them); the last byte: closing (C declines everything)
        self._writing = bytearray(self._max_producers + 1)
        self._fast_cfg: tuple | None = None         # the C append's configuration for this handle's one producer
        self._fast_pid = 0                          # ... valid in this process only
        self._last_rejected = HEADER_BYTES + _ALIGN
        self._wake_writer: tuple[int, int] = (0, -1)   # (consumer token, write fd of its wake pipe)
        self._wake_lock = threading.Lock()
        # consumer side (this handle, when it is the consumer)
        self._consumer_lock = threading.Lock()
        self._token = 0
        self._token_pid = 0
        self._head = self._scan = 0
        self._pending: list[_Pending] = []
        self._expected_seq: dict[int, int] = {}
        self._empty_pos = -1
        self._empty_since = self._empty_next_check = 0.0
        self._lone_pos, self._lone_next_check = -1, 0.0   # a lone WRITING record at the scan position
        self._wake_pipe: WakePipe | None = None
        self._arrivals = ArrivalPredictor(_POLL_DUTY)
        self._wait_t0 = self._wait_t1 = 0.0        # the last wait, settled at the start of the next one
        self._poll: tuple[float, Any] | None = None  # (start, result) of the last polling window
        self._views_out: list[memoryview] = []   # payload views handed out by read_views
        self._held: int | None = None             # the read cursor may not pass this while views are out
        self._seen_ns = 0                          # publish stamp of the last record a wait saw
        # runs on close() or when the handle is garbage collected: views first, then unmap, then unlink
        self._finalizer = weakref.finalize(self, _release, self._atomic, q, owner.close if owner else segment.close,
                                           self._unlinker, self._views_out, prefault_job)

    def __reduce__(self) -> tuple:
        return (SharedRing.attach, (self.name,))

    def __enter__(self) -> SharedRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"wpos={self._q[_W_WPOS]} rpos={self._q[_W_RPOS]}"
        return f"<SharedRing {self.name} capacity={self._cap} {'owner ' if self._owner else ''}{state}>"

    @property
    def fast(self) -> bool:
        """True while this handle uses the C hot paths (:mod:`elastream.ipc._ringfast`, when built).

        Set it False to run the Python paths alone (the tests run every ring test both ways).
        """
        return self._fast

    @fast.setter
    def fast(self, on: bool) -> None:
        self._fast = bool(on) and _ringfast is not None
        self._configure_fast_write()

    @property
    def capacity(self) -> int:
        """Bytes in the data area."""
        return self._cap

    @property
    def max_record_bytes(self) -> int:
        """The largest record (header + payload, aligned) a write may produce: half the capacity."""
        return self._cap // 2

    @property
    def is_owner(self) -> bool:
        """True for the handle that created (and will unlink) the segment."""
        return self._owner is not None

    def close(self) -> None:
        """Unmap this handle (idempotent); the owner also unlinks the segment.

        Other processes keep their mappings until they close.
        """
        if self._closed:
            return
        self._writing[-1] = 1                       # under the GIL: no C append runs on the mapping after this
        self._fast_cfg = None
        try:
            self.release_consumer()
            self._drop_wake_writer()
        finally:
            with self._consumer_lock:              # a reader polling in C holds it: unmap only after it left
                self._closed = True
                self._finalizer()

    def unlink(self) -> None:
        """Remove the segment's name (owner only; idempotent). Mappings stay valid until closed."""
        if self._unlinker is None:
            raise RuntimeError(f"ring {self.name}: only the handle that created it may unlink it")
        self._unlinker()

    def _check_open(self) -> None:
        if self._closed:
            raise RingClosedError(f"ring {self.name} is closed")

    # -- producers ---------------------------------------------------------------------------------
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

    # -- consumer ----------------------------------------------------------------------------------
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

    # -- statistics --------------------------------------------------------------------------------
    def statistics(self) -> RingStats:
        """A snapshot of the ring's counters (readable from any handle)."""
        self._check_open()
        if self._consumer_lock.acquire(blocking=False):   # not while the consumer naps holding it (up to 50 ms):
            try:                                          # then the last wait is settled at its next one
                self._settle_last_wait()
            finally:
                self._consumer_lock.release()
        q = self._q
        word = q[_W_PRODUCERS]
        registered = min(word & _M32, self._max_producers)
        sums = [0] * _SLOT_WORDS
        for pid in range(registered):
            slot = self._slot(pid)
            for i in range(_SLOT_WORDS):
                sums[i] += q[slot + i]
        return RingStats(
            capacity=self._cap, records_written=sums[_P_RECORDS], payloads_written=sums[_P_PAYLOADS],
            bytes_written=sums[_P_BYTES], records_read=q[_W_RECORDS_READ], payloads_read=q[_W_PAYLOADS_READ],
            bytes_read=q[_W_BYTES_READ], full_events=sums[_P_FULL], flush_wraps=sums[_P_FLUSHES],
            failed_records_skipped=q[_W_FAILED_SKIPPED], abandoned_records=sums[_P_ABANDONED],
            rewritten_records=sums[_P_REWRITES], empty_recoveries=q[_W_EMPTY_RECOVERIES],
            sequence_errors=q[_W_SEQUENCE_ERRORS], max_occupancy=q[_W_MAX_OCCUPANCY],
            occupancy=q[_W_WPOS] - q[_W_RPOS], producers_registered=word & _M32, producers_closed=word >> 32,
            write_wait_s=sums[_P_WAIT_NS] / 1e9, read_wait_s=q[_W_READ_WAIT_NS] / 1e9,
            read_poll_s=q[_W_READ_POLL_NS] / 1e9, poll_windows=q[_W_POLL_WINDOWS], poll_hits=q[_W_POLL_HITS],
        )

    # == internals: producer ========================================================================
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

    # == internals: consumer ========================================================================
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
        q, cap, data, salt = self._q, self._cap, self._data, self._salt
        out: list[tuple[int, bytes]] = []
        records = failed = 0
        w = q[_W_WPOS]
        blocked: set[int] = set()
        if self._pending:                       # the window's left side: records we had to pass
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

    # == internals: waiting =========================================================================
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
        q = self._q
        self._atomic.store(_W_DATA_WAITERS * 8, 1)    # announce (a full barrier) ...
        seq = q[_W_DATA_SEQ]
        if self._readable():                          # ... then re-check: no lost wake-up
            return True
        pipe = self._wake_pipe
        if pipe is not None and not q[_W_WAKE_BROKEN]:
            return None if pipe.wait(seconds) else False
        _FUTEX.wait(self._atomic.address(_W_DATA_SEQ * 8), seq, seconds)
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


def _record_size(length: int) -> int:
    return (HEADER_BYTES + length + _ALIGN - 1) & -_ALIGN


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


def _release(atomic: AtomicWords, q: memoryview, unmap: Any, unlinker: _Unlinker | None,
             views: list[memoryview], prefault_job: BackgroundPrefault | None) -> None:
    _release_views(views)                      # views a read_views caller still holds: released, not dangling
    atomic.release()
    q.release()

    def unmap_quietly() -> None:
        try:
            unmap()
        except BufferError:                    # a view the caller sliced further keeps the mapping: it goes with it
            pass

    if prefault_job is not None:
        prefault_job.cancel(then=unmap_quietly)  # a thread still mapping pages in unmaps after its current chunk
    else:
        unmap_quietly()
    if unlinker is not None:
        unlinker()


def _prefault(mapping: Any, data_offset: int) -> BackgroundPrefault:
    """Map in the control block, the producer slots and the data a first few records use now, the rest meanwhile.

    A first lap that faults pages in inside writes and reads cost the ``bench ipc`` latency
    point ~30 µs of its p50; mapping all of a 4 MB ring up front cost every worker process
    ~1.3 ms per ring before its first tuple. The background part is usually done long
    before the writer gets there.
    """
    return prefault_head(mapping, data_offset + PREFAULT_HEAD)


def _data_offset(buf: memoryview) -> int:
    """The data area's offset from a mapped ring's header (0 if it is not one: the constructor says so)."""
    if len(buf) < _CTRL_WORDS * 8:
        return 0
    return struct.unpack_from("<Q", buf, _W_DATA_OFFSET * 8)[0]


def _release_views(views: list[memoryview]) -> None:
    for view in views:
        view.release()
    views.clear()


class _Unlinker:
    """Unlinks the owner's segment once, and only from the creating process (not from a forked child)."""

    def __init__(self, shm: shared_memory.SharedMemory, creator_pid: int):
        self.shm, self.creator_pid, self.done = shm, creator_pid, False

    def __call__(self) -> None:
        if self.done or os.getpid() != self.creator_pid:
            return
        self.done = True
        try:
            self.shm.unlink()
        except FileNotFoundError:
            # removed behind our back: keep the resource tracker from reporting (and retrying) it
            try:
                resource_tracker.unregister(self.shm._name, "shared_memory")  # noqa: SLF001
            except Exception:  # noqa: BLE001
                pass
