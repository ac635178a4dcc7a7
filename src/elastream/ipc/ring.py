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

Modules
-------
:class:`SharedRing` is composed of mixins, one per part of the algorithm, so
each reads on its own; this module keeps the life cycle, the statistics and
the public names:

* :mod:`elastream.ipc._ring_format` — the layout: record header, statuses,
  control-block words, producer slots; :class:`RingStats`.
* :mod:`elastream.ipc._ring_producer` — registration, reservation (CAS), the
  append and the wrap-around flush.
* :mod:`elastream.ipc._ring_consumer` — the claim, the sliding window, delivery,
  failed and stalled records, views.
* :mod:`elastream.ipc._ring_waiting` — waits and wake-ups (wake pipe, futex,
  hybrid polling, :class:`ReadWaiter`).
* :mod:`elastream.ipc._ring_segment` — prefault, release, unmap and unlink.

Memory ordering: x86-64 total store order for plain aligned 8-byte loads and
stores; every read-modify-write is an ``atomics`` operation (a full barrier).
See :mod:`elastream.ipc._sync`.
"""

from __future__ import annotations

import secrets
import weakref
from importlib import import_module
from multiprocessing import shared_memory
from typing import Any

from elastream.ipc._ring_consumer import RingConsumer
from elastream.ipc._ring_format import (_ALIGN, _CTRL_WORDS, _M32, _MAGIC, _P_ABANDONED, _P_BYTES, _P_FLUSHES,
                                        _P_FULL, _P_PAYLOADS, _P_RECORDS, _P_REWRITES, _P_WAIT_NS, _SLOT_WORDS,
                                        _VERSION, _W_BYTES_READ, _W_CAPACITY, _W_CONSUMER_PID, _W_CREATOR_PID,
                                        _W_CREATOR_START, _W_DATA_OFFSET, _W_EMPTY_RECOVERIES, _W_EXPECTED,
                                        _W_FAILED_SKIPPED, _W_MAGIC, _W_MAX_OCCUPANCY, _W_MAX_PRODUCERS,
                                        _W_PAYLOADS_READ,
                                        _W_POLL_HITS, _W_POLL_WINDOWS, _W_PRODUCERS, _W_READ_POLL_NS,
                                        _W_READ_WAIT_NS, _W_RECORDS_READ, _W_RPOS, _W_SALT, _W_SEQUENCE_ERRORS,
                                        _W_STALL_US, _W_VERSION, _W_WPOS, RingClosedError, RingStats, _ringfast)
from elastream.ipc._ring_format import (FAILED, FLUSH, HEADER_BYTES, KIND_BATCH, KIND_SINGLE,  # noqa: F401 - API
                                        READ, READY, STATUS_NAMES, WRITING)
from elastream.ipc._ring_producer import RingProducer
from elastream.ipc._ring_segment import (PREFAULT_HEAD, _data_offset, _prefault, _release,  # noqa: F401 - API
                                         _Unlinker)
from elastream.ipc._ring_waiting import ReadWaiter, RingWaiting  # noqa: F401 - ReadWaiter: API
from elastream.ipc._sync import AtomicWords, BackgroundPrefault, allocate, attach_segment, process_identity

__all__ = ["HEADER_BYTES", "RingClosedError", "RingStats", "SharedRing"]

# the parts whose other module-level names (layout words, tunables, helpers) stay reachable as ring.<name>
_PARTS = ("_ring_format", "_ring_producer", "_ring_consumer", "_ring_waiting", "_ring_segment")
_MIN_CAPACITY = 4096


def __getattr__(name: str) -> Any:
    """Names this module had before it was split (``_W_WPOS``, ``_record_size``, ``_FUTEX``, ...): from its parts.

    Tests and tools reach into the layout through ``elastream.ipc.ring``; they
    read the parts' objects (patching one must be done on the part that uses it).
    """
    for part in _PARTS:
        module = import_module(f"elastream.ipc.{part}")
        if name in vars(module):
            return vars(module)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SharedRing(RingProducer, RingConsumer, RingWaiting):
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
               max_producers: int = 64, stall_timeout: float = 10.0, prefault: bool = True,
               reserve: bool = True) -> SharedRing:
        """Create a ring with a data area of ``capacity_bytes`` (rounded up to 8); this handle owns it.

        ``producers``: how many producers will register (end-of-stream waits for
        all of them); ``stall_timeout``: seconds after which a record still
        WRITING is skipped even if its producer's process is alive. The
        segment's pages are allocated at once; ``prefault=False`` leaves them
        unmapped in this handle, for an owner that will neither write nor read
        (every handle that attaches maps them itself): ~1 ms instead of ~3 ms
        for 4 MB. ``reserve=False`` leaves the pages to :meth:`reserve_pages` (or to the first
        writes), for a ring that may never carry a record (a worker held ready).

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
            if reserve:
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
    def attach(cls, name: str, *, prefault: bool = True) -> SharedRing:
        """Map the existing ring ``name`` (from any process); this handle does not own it.

        ``prefault=False`` leaves the data pages unmapped in this handle until it touches them, for one
        that only reads the statistics or registers and closes a producer, or an end that may never carry a
        record (no page-table work, no background thread).

        Example: ``ring = SharedRing.attach(owner.name)``
        """
        segment = attach_segment(name)
        job = _prefault(segment._mmap, _data_offset(segment.buf)) if prefault else None  # noqa: SLF001
        try:
            return cls(name, segment.buf, segment=segment, prefault_job=job)
        except BaseException:
            if job is not None:
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
        self._init_producer()
        self._init_consumer()
        self._init_waiting()
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

    def reserve_pages(self) -> None:
        """Give the segment all its pages now (owner only): a full ``/dev/shm`` raises OSError (ENOSPC) here
        rather than a SIGBUS on some later write. What ``create(reserve=True)`` does at once."""
        if self._owner is None:
            raise RuntimeError(f"ring {self.name}: only the handle that created it may reserve its pages")
        self._check_open()
        allocate(self._owner._fd, self._owner.size)  # noqa: SLF001 - the segment's own file

    def unlink(self) -> None:
        """Remove the segment's name (owner only; idempotent). Mappings stay valid until closed."""
        if self._unlinker is None:
            raise RuntimeError(f"ring {self.name}: only the handle that created it may unlink it")
        self._unlinker()

    def _check_open(self) -> None:
        if self._closed:
            raise RingClosedError(f"ring {self.name} is closed")

    # -- statistics --------------------------------------------------------------------------------
    @property
    def has_consumer(self) -> bool:
        """True once a consumer has claimed the ring (its first read): one word of shared memory, any thread."""
        self._check_open()
        return self._q[_W_CONSUMER_PID] != 0

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
