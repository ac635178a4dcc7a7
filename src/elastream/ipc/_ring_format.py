"""The shared ring's layout: record format (Fig. 5a), control block, producer slots, and the types all parts share.

Role: the single definition of where everything lives in a ring's segment —
the 32-byte record header and its statuses, the indices of the control
block's 8-byte words, the producer slots — plus the C extension's copy of
them (:func:`_ringfast.layout` is called once here, so ``_ringfast.c`` and the
Python paths read the same words), the statistics snapshot
(:class:`RingStats`) and the record the consumer's window keeps on its left
side (:class:`_Pending`). :mod:`elastream.ipc.ring` describes the layout and
its invariants in prose.

Threading model: constants and immutable types only, read by every thread of
every process that maps a ring; :func:`track_pid` registers an at-fork hook
once per module that calls it, at import.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from elastream.errors import ElastreamError

try:                                   # the optional C hot path (setup.py builds it where a compiler exists)
    from elastream.ipc import _ringfast
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    _ringfast = None

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

_LIVENESS_PERIOD = 0.02   # s between checks of a stuck writer's process (the consumer's window)

if _ringfast is not None:
    try:
        _ringfast.layout(_W_WPOS, _W_RPOS, _W_DATA_WAITERS, _P_RESERVING, _P_SEQ, _P_RECORDS, _P_PAYLOADS, _P_BYTES,
                         _W_BYTES_READ, _W_LAST_PUBLISH_NS, _W_RECORDS_READ, _W_PAYLOADS_READ, _W_SEQUENCE_ERRORS,
                         WRITING, READY, READ, KIND_BATCH)
    except TypeError:  # pragma: no cover - an extension built from an older source: the Python paths instead
        _ringfast = None


def track_pid(namespace: dict[str, Any]) -> int:
    """This process's pid, kept current in ``namespace["_PID"]`` in forked children.

    Call it as ``_PID = track_pid(globals())``. Why a global in each module:
    the hot paths compare a handle's cached pid with this process's on every
    call, and a global load is the cheapest way (``os.getpid()`` is a system
    call); a name imported from another module would be a stale copy after a
    fork.
    """
    def refresh() -> None:
        namespace["_PID"] = os.getpid()

    os.register_at_fork(after_in_child=refresh)
    return os.getpid()


def _record_size(length: int) -> int:
    return (HEADER_BYTES + length + _ALIGN - 1) & -_ALIGN


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
