"""A ring handle's mapping from start to end: prefault on create and attach, release, unmap and unlink on close.

Role: what :class:`~elastream.ipc.ring.SharedRing` does with its segment
around the algorithm. A new handle maps the head of the data area in at once
and the rest in the background (:func:`_prefault`); a closed or garbage
collected handle releases the payload views it handed out, its atomics and
its word view, then unmaps (after the background prefault let go) and — the
owner only, from the creating process only — unlinks (:func:`_release`,
:class:`_Unlinker`).

Threading model: :func:`_prefault` runs in the thread creating or attaching
the handle and starts one short ``elastream-prefault`` thread;
:func:`_release` runs once, from ``close()`` under the consumer lock (so no
reader is polling the mapping in C) or from the garbage collector's
finalizer, and may hand the unmapping to that thread.
"""

from __future__ import annotations

import os
import struct
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from elastream.ipc._ring_format import _CTRL_WORDS, _W_DATA_OFFSET
from elastream.ipc._sync import AtomicWords, BackgroundPrefault, prefault_head

PREFAULT_HEAD = 64 << 10  # bytes of the data area a new handle maps in before it returns (the rest: background)


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
