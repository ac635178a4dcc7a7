"""``futex(2)`` wait and wake on a 32-bit word of a shared mapping (Linux; shared, not private).

Role: what a ring's sleepers block on when no wake pipe reaches them:
producers blocked on a full ring sleep on the read cursor, and a consumer
whose producers cannot open its wake pipe sleeps on a sequence word. Not
``FUTEX_PRIVATE``, so it works across processes that map the same segment and
no file descriptor has to be passed to anyone. Where the syscall is
unavailable (not Linux, unknown architecture) :attr:`Futex.available` is
False and callers fall back to a capped exponential back-off.

Threading model: one :class:`Futex` per process serves every thread; a wait
releases the GIL, and a wake may come from any thread of any process mapping
the word. Waits return on a wake, a change of the word, a signal or the
timeout, so callers always re-check their condition.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time


_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Futex:
    """Wait on / wake a 32-bit word of shared memory (Linux ``futex(2)``, shared, not private).

    ``available`` is False where the syscall cannot be used; :meth:`wait` then
    sleeps for the back-off interval it is given instead.

    Example::

        futex = Futex()
        futex.wake(address, 1)   # no-op when nobody waits
    """

    def __init__(self) -> None:
        self._syscall = None
        if _SYS_FUTEX is not None and os.name == "posix" and platform.system() == "Linux":
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.syscall
                fn.restype = ctypes.c_long
                self._syscall = fn
            except (OSError, AttributeError):
                self._syscall = None
        self.available = self._syscall is not None

    def wait(self, address: int, expected: int, timeout: float) -> None:
        """Sleep while the word at ``address`` equals ``expected`` (low 32 bits), at most ``timeout`` s.

        Returns on a wake, a value change, a signal or the timeout; callers re-check their condition.
        Releases the GIL while sleeping.
        """
        timeout = max(0.0, timeout)
        if self._syscall is None:
            time.sleep(timeout)
            return
        ts = _Timespec(int(timeout), int((timeout % 1.0) * 1e9))
        self._syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAIT),
                      ctypes.c_uint32(expected & 0xFFFFFFFF), ctypes.byref(ts), None, ctypes.c_int(0))

    def wake(self, address: int, count: int = 1) -> None:
        """Wake up to ``count`` waiters sleeping on ``address``."""
        if self._syscall is not None:
            self._syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAKE),
                          ctypes.c_int(count), None, None, ctypes.c_int(0))
