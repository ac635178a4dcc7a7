"""Atomic operations on 8-byte words of a shared mapping, through the ``atomics`` package's C functions.

Role: every read-modify-write the shared ring makes (the write cursor's CAS,
status CASes, counters a producer and the consumer share) goes through
:class:`AtomicWords`: compare-and-swap, fetch-add, exchange and sequentially
consistent stores, each a real lock-free CPU instruction (``lock cmpxchg`` /
``lock xadd`` on x86-64). The package's public methods cost 5-13 µs a call
(argument checking and buffer wrapping in Python); the same C functions,
through the function pointers the package resolves, cost about 1.5 µs called
with ctypes and 0.8 µs called with cffi (the package's own FFI dependency) —
and, what matters for latency, about 60 µs vs 37 µs when the call has not run
for a few milliseconds (measured on the 2-vCPU VM). So the pointers are called
through cffi after a self-test, with the public API as fallback.

Threading model: an :class:`AtomicWords` may be used from any thread of the
process that made it (the per-call scratch words are thread-local); another
process maps the segment and makes its own. The raw function pointers are
resolved once per process and inherited by forked children
(:func:`warm_up` does it ahead of time in a fork server).

Memory-ordering assumption: plain aligned 8-byte loads and stores through a
``memoryview.cast("Q")`` compile to single ``mov`` instructions, and the ring
relies on x86-64's total store order for them (stores are seen in program
order, loads are not reordered with other loads); every read-modify-write
goes through :class:`AtomicWords`, which is a full barrier.
"""

from __future__ import annotations

import ctypes
import threading

import atomics
import cffi


_UINT64_MASK = (1 << 64) - 1


class AtomicWords:
    """Atomic operations on 8-byte words of ``buf`` (a writable buffer), addressed by byte offset.

    Keeps an export of ``buf`` (so the mapping cannot be unmapped under it)
    until :meth:`release`.

    Example::

        buf = bytearray(64)
        words = AtomicWords(memoryview(buf))
        assert words.cas(8, 0, 5) and words.fetch_add(8, 2) == 5 and words.exchange(8, 1) == 7
        words.release()
    """

    def __init__(self, buf: memoryview):
        self._buf = buf
        self._anchor = ctypes.c_char.from_buffer(buf)
        self._base = ctypes.addressof(self._anchor)
        self._local = threading.local()
        self._views: dict[int, object] = {}
        self._views_lock = threading.Lock()
        self._fp_cas, self._fp_fetch_add, self._fp_store, self._fp_exchange = _raw_functions()
        self._cbase = _FFI.cast("char *", self._base)
        self.fast = self._fp_cas is not None and self._self_test()

    def address(self, offset: int) -> int:
        """The address of byte ``offset`` of the buffer in this process."""
        return self._base + offset

    def cas(self, offset: int, expected: int, desired: int) -> bool:
        """Compare-and-swap the word at ``offset``: set it to ``desired`` if it equals ``expected``."""
        if self.fast:
            exp, des, _ = self._scratch()
            exp[0] = expected
            des[0] = desired
            return bool(self._fp_cas(self._cbase + offset, exp, des, 5, 5))
        return bool(self._view(offset).cmpxchg_strong(expected, desired).success)

    def fetch_add(self, offset: int, delta: int) -> int:
        """Add ``delta`` (may be negative, modulo 2**64) to the word at ``offset``; return the old value."""
        if self.fast:
            exp, _, res = self._scratch()
            exp[0] = delta & _UINT64_MASK
            self._fp_fetch_add(self._cbase + offset, exp, 5, res)
            return res[0]
        return self._view(offset).fetch_add(delta & _UINT64_MASK)

    def store(self, offset: int, value: int) -> None:
        """Sequentially consistent store (a full barrier: later loads see everything before it)."""
        if self.fast:
            exp = self._scratch()[0]
            exp[0] = value
            self._fp_store(self._cbase + offset, exp, 5)
            return
        self._view(offset).store(value)

    def exchange(self, offset: int, value: int) -> int:
        """Atomically replace the word at ``offset`` with ``value``; return the old value."""
        if self.fast:
            exp, _, res = self._scratch()
            exp[0] = value
            self._fp_exchange(self._cbase + offset, exp, 5, res)
            return res[0]
        return self._view(offset).exchange(value)

    def release(self) -> None:
        """Drop the buffer export and any ``atomics`` views (call before unmapping)."""
        with self._views_lock:
            for ctx in self._views.values():
                ctx.release()  # type: ignore[attr-defined]
            self._views.clear()
        self._anchor = None  # type: ignore[assignment]
        self._cbase = _FFI.NULL

    # -- internals -----------------------------------------------------------------------------
    def _scratch(self) -> tuple:
        local = self._local
        try:
            return local.scratch
        except AttributeError:
            local.scratch = (_FFI.new("uint64_t *"), _FFI.new("uint64_t *"), _FFI.new("uint64_t *"))
            return local.scratch

    def _view(self, offset: int):
        view = self._views.get(offset)
        if view is None:
            with self._views_lock:
                view = self._views.get(offset)
                if view is None:
                    ctx = atomics.atomicview(buffer=self._buf[offset:offset + 8], atype=atomics.UINT)
                    view = ctx.__enter__()
                    self._views[offset] = ctx
        return view

    def _self_test(self) -> bool:
        """Check the raw function pointers behave as CAS / fetch-add / store / exchange on a private word."""
        probe = _FFI.new("uint64_t *", 7)
        exp, des, res = self._scratch()
        try:
            exp[0], des[0] = 7, 9
            ok = self._fp_cas(probe, exp, des, 5, 5)
            exp[0], des[0] = 7, 11
            failed = self._fp_cas(probe, exp, des, 5, 5)
            if not ok or failed or probe[0] != 9 or exp[0] != 9:
                return False
            exp[0] = 3
            self._fp_fetch_add(probe, exp, 5, res)
            if res[0] != 9 or probe[0] != 12:
                return False
            exp[0] = 1
            self._fp_store(probe, exp, 5)
            if probe[0] != 1:
                return False
            exp[0] = 4
            self._fp_exchange(probe, exp, 5, res)
            return res[0] == 1 and probe[0] == 4
        except Exception:  # noqa: BLE001 - any surprise means: use the public API
            return False


_FFI = cffi.FFI()
# patomic's explicit-order signatures (seq_cst = 5): store(obj, desired, order);
# cmpxchg(obj, expected, desired, succ, fail) -> ok; fetch_add / exchange(obj, arg, order, result)
_SIGNATURES = ("int (*)(void *, void *, void *, int, int)", "void (*)(void *, void *, int, void *)",
               "void (*)(void *, void *, int)", "void (*)(void *, void *, int, void *)")


def _raw_functions() -> tuple:
    """The ``atomics`` package's C functions for 8-byte words as cffi pointers, or Nones if not found.

    Resolved once per process (the first call parses the cffi signatures, ~5 ms on the VM): the
    pointers stay valid for the process's life and in every process forked from it.
    """
    global _RAW
    if _RAW is None:
        _RAW = _resolve_raw_functions()
    return _RAW


_RAW: tuple | None = None


def _resolve_raw_functions() -> tuple:
    try:
        ctx = atomics.atomicview(buffer=bytearray(8), atype=atomics.UINT)
        with ctx as view:
            core = view._core  # noqa: SLF001 - the package's resolved function pointers (atomics < 2)
            ops = (core.get_op_func(atomics.OpType.CMPXCHG_STRONG), core.get_op_func(atomics.OpType.FETCH_ADD),
                   core.get_op_func(atomics.OpType.STORE), core.get_op_func(atomics.OpType.EXCHANGE))
        if not all(ops):
            return None, None, None, None
        return tuple(_FFI.cast(sig, ctypes.cast(op, ctypes.c_void_p).value) for sig, op in zip(_SIGNATURES, ops))
    except Exception:  # noqa: BLE001
        return None, None, None, None


def warm_up() -> None:
    """Do now the one-time work of the first :class:`AtomicWords` in this process (~5 ms).

    A fork server calls this (through :mod:`elastream.processes.child`) so that the workers
    forked from it attach their rings without paying it on their critical path.
    """
    AtomicWords(memoryview(bytearray(8))).release()
