"""Shut down the multi-process runs still going when the interpreter exits.

Why: part 0 of a multi-process run runs in the parent on daemon threads, and
those threads spend their time inside the shared-memory ring code. A script
that ends (falls off its end, ``sys.exit``, an uncaught KeyboardInterrupt)
while a run is still going never waits for it: the interpreter then tears
down its modules and unmaps what those threads are reading, and the process
dies of SIGSEGV (exit code -11) instead of its own exit code, leaving ring
segments in ``/dev/shm`` for the resource tracker to complain about.

So every :class:`~elastream.processes.supervisor.ProcessRunHandle` is
:func:`track`-ed in a weak set while it runs, and one ``atexit`` hook
(registered with the first run, so it runs before the hooks of
``multiprocessing`` and of the fork server, which were registered earlier:
``atexit`` runs last-registered first) asks each still-running one to shut
down, waits a bounded time for its end (every part joined, its rings
unlinked: the supervisor thread does that) and unlinks what is left of its
rings if it did not end in time.

A threads-backend run needs nothing of the kind: its daemon threads run
Python code on Python objects only (no mapped memory of their own), which the
interpreter's finalisation stops safely when they next take the GIL.

Threading: :func:`track` is called from the thread that starts a run; the
hook runs on the main thread at exit, after non-daemon threads were joined.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

#: Longest wait at exit for a run's parts to end, beyond their own shutdown grace period.
EXIT_WAIT_MARGIN_S = 3.0

_live: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_hook_registered = False


def track(run: Any) -> None:
    """Remember ``run`` (a ProcessRunHandle) until it ends, so that an exit shuts it down first."""
    global _hook_registered
    with _lock:
        _live.add(run)
        if not _hook_registered:
            atexit.register(shut_down_live_runs)
            _hook_registered = True


def forget(run: Any) -> None:
    """``run`` has ended: nothing is left to do for it at exit."""
    with _lock:
        _live.discard(run)


def live_runs() -> list[Any]:
    """The tracked runs that have not ended yet."""
    with _lock:
        return [run for run in _live if not run.finished.is_set()]


def shut_down_live_runs() -> int:
    """Ask every run still going to stop, wait for each (bounded), unlink what is left; return how many."""
    runs = live_runs()
    for run in runs:
        run.request_shutdown()  # all of them first: their grace periods overlap
    for run in runs:
        shut_down(run, asked=True)
    return len(runs)


def shut_down(run: Any, asked: bool = False) -> bool:
    """Stop ``run`` and wait for its end; True if it ended within its grace period plus a margin.

    A run that did not end in time (a part stuck in user code) still has its ring
    segments unlinked, so none outlives this process.
    """
    if not asked:
        run.request_shutdown()
    ended = run.finished.wait(run.config.scheduling.shutdown_grace_s + EXIT_WAIT_MARGIN_S)
    if not ended:
        run.unlink_rings()
    forget(run)
    return ended
