"""Eager untracking of kept result tuples from the cycle collector, for sinks that keep what they take.

Every tuple a sink like :class:`~elastream.ops.sinks.Collect` keeps would be
walked by one young collection before CPython sees that it holds only atomic
values and stops tracking it; :func:`untrack_atomic` makes that same test
when the sink takes the tuples, while they are still in the cache (the
reasons and the collector settings of a run: :mod:`elastream.runtime.gc_tuning`).

The test itself is the optional C extension ``_untrack`` (built by setup.py
inside the runtime package). It is loaded by name on first use, so that this
module — part of the operator API, below the runtime — imports nothing from
the runtime when it is imported; without the extension :func:`untrack_atomic`
does nothing.

Threading: any thread. The function only reads and untracks the tuples of the
list it is given, which the caller must own; the first calls may race to load
the extension, which is harmless (the import system serialises the import and
every racer stores the same function).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["EXTENSION", "extension_untrack", "untrack_atomic"]

#: Module name of the C extension (setup.py builds it there; it stays where it is built).
EXTENSION = "elastream.runtime._untrack"

_NOT_LOADED = object()
_extension: object = _NOT_LOADED


def extension_untrack() -> Callable[[list], int] | None:
    """The extension's ``untrack_atomic``, or None when elastream was built without it (loaded once)."""
    global _extension
    if _extension is _NOT_LOADED:
        try:
            _extension = importlib.import_module(EXTENSION).untrack_atomic
        except ImportError:  # built without a C compiler: the collector untracks them at their first collection
            _extension = None
    return _extension  # type: ignore[return-value]


def untrack_atomic(items: list) -> int:
    """Stop the cycle collector tracking the tuples in ``items`` that hold only atomic values; how many.

    The test is CPython's own (``_PyTuple_MaybeUntrack``): a tuple whose items are
    all of non-GC types (numbers, strings, bytes, None, ...) or untracked tuples
    can never be part of a cycle. Nested tuples qualify up to three levels deep;
    anything else is left as it is. Without the C extension this does nothing and
    returns 0 (the collector still untracks them itself, at their first collection).

    Example: for a run-time ``n``, ``items = [(n, "a"), (n, [3])]; untrack_atomic(items)`` → 1,
    and ``gc.is_tracked(items[0])`` is now False while ``gc.is_tracked(items[1])`` stays True
    (tuples written as literals in code are constants, untracked from the start).
    """
    untrack = _extension if _extension is not _NOT_LOADED else extension_untrack()
    return untrack(items) if untrack is not None else 0  # type: ignore[operator]
