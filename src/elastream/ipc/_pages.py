"""A shared-memory segment's pages: mapping by name (untracked), allocation up front, prefault.

Role: how a ring's segment gets into memory. :func:`attach_segment` maps an
existing POSIX shared-memory segment *without* registering it with
``multiprocessing.resource_tracker`` (Python 3.11's
``SharedMemory(create=False)`` registers it, so the tracker of an attaching
process would unlink it, or report it leaked, when that process exits; only
the creating process must own the segment). :func:`allocate` gives the file
its pages, and :func:`prefault` / :func:`prefault_head` map them into a
mapping up front (the head at once, the rest by a :class:`BackgroundPrefault`
thread), so the first lap of a ring does not take page faults inside writes
and reads.

Threading model: :func:`allocate`, :func:`prefault_head` and
:func:`attach_segment` are called by the thread creating or attaching a ring
handle. A :class:`BackgroundPrefault` runs one short-lived daemon thread
(``elastream-prefault``) with the GIL released during each ``madvise``; the
handle's owner cancels it before unmapping, and may hand the unmapping to the
thread (see the class).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import threading
from collections.abc import Callable


class Segment:
    """A mapped POSIX shared-memory segment opened by name, untracked by the resource tracker."""

    def __init__(self, name: str):
        self.name = name
        fd = _shm_open(name)
        try:
            size = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.size = size
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        """Unmap (every export of :attr:`buf` must have been released)."""
        if self._mmap is not None:
            self.buf.release()
            self._mmap.close()
            self._mmap = None  # type: ignore[assignment]


#: madvise(2) advice that faults every page of a mapping in, writable (Linux 5.14+; 23 on every arch).
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def prefault(mapping: mmap.mmap) -> bool:
    """Map every page of ``mapping`` into this process now (False where the kernel cannot).

    Why: a ring's pages are otherwise faulted in one by one on first touch, in
    the middle of a write or a read, for the whole first lap of a new ring in
    every process that maps it. Measured on the 2-vCPU VM (``bench ipc``'s
    first point, 10 KB at 100 msg/s, which never laps a 2 MB ring): p50
    111-144 µs with lazy faults, 79-88 µs prefaulted. All of it up front cost
    creating and attaching a 4 MB ring ~3 and ~1.3 ms, so rings now map their
    head with this and the rest with :class:`BackgroundPrefault`
    (:func:`prefault_head`).
    """
    try:
        mapping.madvise(MADV_POPULATE_WRITE)
    except (OSError, ValueError):
        return False
    return True


#: Bytes a background prefault maps per madvise call (it checks for cancellation between calls).
PREFAULT_CHUNK = 256 << 10


class BackgroundPrefault:
    """Prefault bytes ``[start, end)`` of ``mapping`` in a short-lived thread; :meth:`cancel` before unmapping.

    Why: a 4 MB ring takes ~1.3 ms to map in, and a worker process attaches its rings on
    its critical path before its first tuple, while the pages far into the ring are
    touched only after a lap's worth of data. The caller maps the head now and leaves
    the rest to this thread, which calls ``madvise(2)`` through ctypes (the GIL is
    released meanwhile; ``mmap.madvise`` would hold it) one :data:`PREFAULT_CHUNK` at a
    time, checking for cancellation in between. The thread ends when done.

    Threading: created and cancelled by the mapping's owner; :meth:`cancel` may hand the
    unmapping to the thread, which then runs it once its madvise call has returned (so
    closing a ring never waits for a thread that a busy machine has not scheduled).
    Holds an export of the mapping until then.

    Example::

        job = BackgroundPrefault(mapping, 64 << 10, len(mapping))
        ...
        job.cancel(then=mapping.close)   # now, or by the thread after its current chunk
    """

    def __init__(self, mapping: mmap.mmap, start: int, end: int):
        self._cancelled = False
        self._anchor: ctypes.c_char | None = None
        self._lock = threading.Lock()
        self._running = False
        self._then: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        if _MADVISE is None or end <= start:
            return
        self._anchor = ctypes.c_char.from_buffer(mapping)
        self._running = True
        self._thread = threading.Thread(target=self._run, args=(ctypes.addressof(self._anchor), start, end),
                                        name="elastream-prefault", daemon=True)
        self._thread.start()

    def _run(self, base: int, start: int, end: int) -> None:
        try:
            for offset in range(start, end, PREFAULT_CHUNK):
                if self._cancelled:
                    return
                if _MADVISE(ctypes.c_void_p(base + offset), ctypes.c_size_t(min(PREFAULT_CHUNK, end - offset)),
                            MADV_POPULATE_WRITE) != 0:
                    return  # an older kernel (EINVAL) or no memory: pages then come on first touch
        finally:
            with self._lock:
                self._running = False
                then, self._then = self._then, None
            self._anchor = None
            if then is not None:
                then()

    def cancel(self, then: Callable[[], None] | None = None) -> None:
        """Stop after the chunk in progress and let go of the mapping; idempotent.

        Without ``then``, waits for the thread. With it, returns at once: ``then`` (unmapping)
        runs here if the thread is done, else in the thread as soon as it has let go.
        """
        self._cancelled = True
        if then is not None:
            with self._lock:
                if self._running:
                    self._then = then
                    return
            self._anchor = None
            then()
            return
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._anchor = None


def _libc_madvise():
    if platform.system() != "Linux":
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def prefault_head(mapping: mmap.mmap, head: int) -> BackgroundPrefault:
    """Prefault the first ``head`` bytes of ``mapping`` now and the rest in the background.

    Page-aligned; returns the background job (cancel it before unmapping).
    """
    head = min(len(mapping), -(-head // mmap.PAGESIZE) * mmap.PAGESIZE)
    if _MADVISE is None:
        prefault(mapping)                  # no ctypes madvise: all of it now, as before
        return BackgroundPrefault(mapping, 0, 0)
    anchor = ctypes.c_char.from_buffer(mapping)
    try:
        # through ctypes, as the background part: the GIL is released (mmap.madvise holds it)
        failed = _MADVISE(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(head), MADV_POPULATE_WRITE)
    finally:
        del anchor
    if failed:
        return BackgroundPrefault(mapping, 0, 0)   # the kernel cannot: no point in the rest either
    return BackgroundPrefault(mapping, head, len(mapping))


def allocate(fd: int, size: int) -> bool:
    """Give the shared-memory file ``fd`` all its ``size`` bytes of pages now, without mapping any.

    Why: a new segment's pages are otherwise allocated (and zeroed) on first touch, by
    whichever mapping touches them first. Allocating through the file costs about half of
    :func:`prefault` on a fresh segment (1.1 vs 2.5-3.3 ms for 4 MB on the 2-vCPU VM), needs
    no mapping (so no ``mmap_lock``), and leaves every mapping that is prefaulted later only
    page-table work (~1.3 ms for 4 MB). A full ``/dev/shm`` raises here (ENOSPC) instead of a
    SIGBUS on some later write. False where the file system cannot (then pages come on first touch).
    """
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:
        return False
    try:
        fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise
        return False
    return True


def attach_segment(name: str) -> Segment:
    """Map the existing segment ``name`` without registering it with the resource tracker."""
    return Segment(name)


def _shm_open(name: str) -> int:
    try:
        import _posixshmem  # CPython's own binding, used by multiprocessing.shared_memory

        return _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    except ImportError:
        return os.open(os.path.join("/dev/shm", name), os.O_RDWR)
