"""Primitives under the shared-memory ring: atomic words, futex waits, wake pipes, process liveness, segments.

Role: the few operating-system and hardware facilities :mod:`elastream.ipc.ring`
needs, each behind a small class so the ring reads as its algorithm. This
module gathers them under one name; each lives in its own module:

* :mod:`elastream.ipc._atomic_words` — :class:`AtomicWords`: compare-and-swap,
  fetch-add, exchange and sequentially consistent stores on 8-byte words of a
  mapped segment (the ``atomics`` package's C functions called through cffi);
  :func:`warm_up` resolves them ahead of time in a fork server.
* :mod:`elastream.ipc._futex` — :class:`Futex`: ``futex(2)`` wait/wake on a
  32-bit word of the shared mapping (shared, not private), with a back-off
  where the syscall is unavailable.
* :mod:`elastream.ipc._wake_pipe` — :class:`WakePipe`, :func:`open_wake_writer`,
  :func:`poke`: the consumer's faster wake-up channel, a pipe whose write end
  producers open through ``/proc/<pid>/fd/<n>``.
* :mod:`elastream.ipc._liveness` — :func:`process_identity` /
  :func:`is_process_alive`: pid plus start time from ``/proc``, so a recycled
  pid or a zombie is not mistaken for a live producer.
* :mod:`elastream.ipc._pages` — :func:`attach_segment` (map a segment by name,
  untracked by the resource tracker), :func:`allocate` / :func:`prefault` /
  :func:`prefault_head` / :class:`BackgroundPrefault`: a segment's pages
  allocated and mapped in up front, so the first lap of a ring does not take
  page faults inside writes and reads.

Threading model: every object here may be used from any thread (each module
says more); per-call scratch memory is thread-local. Memory-ordering
assumption: plain aligned 8-byte loads and stores through a
``memoryview.cast("Q")`` compile to single ``mov`` instructions, and the ring
relies on x86-64's total store order for them; every read-modify-write goes
through :class:`AtomicWords`, which is a full barrier.
"""

from __future__ import annotations

from elastream.ipc._atomic_words import AtomicWords, _raw_functions, warm_up  # noqa: F401 - _raw_functions: tests
from elastream.ipc._futex import Futex
from elastream.ipc._liveness import is_process_alive, process_identity
from elastream.ipc._pages import (MADV_POPULATE_WRITE, PREFAULT_CHUNK, BackgroundPrefault, Segment, allocate,
                                  attach_segment, prefault, prefault_head)
from elastream.ipc._wake_pipe import WakePipe, open_wake_writer, poke

__all__ = ["MADV_POPULATE_WRITE", "PREFAULT_CHUNK", "AtomicWords", "BackgroundPrefault", "Futex", "Segment",
           "WakePipe", "allocate", "attach_segment", "is_process_alive", "open_wake_writer", "poke", "prefault",
           "prefault_head", "process_identity", "warm_up"]
