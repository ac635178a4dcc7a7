"""Process identity and liveness from ``/proc``: pid plus start time, so a recycled pid is not mistaken for the old one.

Role: the ring records who writes for each producer id and who consumes, and
the consumer skips records whose writer has died (TurboStream §IV's failed
records, bounded here by liveness instead of window size); a zombie or a
process that reused the pid counts as dead.

Threading model: plain functions, callable from any thread; this process's
own identity is cached per pid (a forked child reads its own once).
"""

from __future__ import annotations

import os


_own_identity: tuple[int, int] | None = None


def process_identity(pid: int | None = None) -> tuple[int, int]:
    """``(pid, start_ticks)`` of a process (default: this one); start is 0 where ``/proc`` is missing.

    This process's own is read once per pid (a forked child has a new one): reading
    ``/proc`` costs ~1 ms on the VM, once per ring a run creates or attaches.
    """
    global _own_identity
    me = os.getpid()
    if pid is None or pid == me:
        own = _own_identity
        if own is None or own[0] != me:
            own = _own_identity = _read_identity(me)
        return own
    return _read_identity(pid)


def _read_identity(pid: int) -> tuple[int, int]:
    stat = _proc_stat(pid)
    return pid, (int(stat[19]) if stat is not None else 0)


def is_process_alive(pid: int, start_ticks: int) -> bool:
    """True unless process ``pid`` (started at ``start_ticks``) has exited, is a zombie, or was replaced."""
    if pid <= 0:
        return True
    stat = _proc_stat(pid)
    if stat is None:
        if os.path.isdir("/proc/self"):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if stat[0] in ("Z", "X"):
        return False
    return start_ticks == 0 or int(stat[19]) == start_ticks


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()
