"""The garbage collector's young-generation threshold while flows run.

Why
---
CPython collects its youngest generation every 700 net allocations of
containers (tuples, lists, dicts). A stream allocates at least one container
per tuple, and most of them die young — but not before the next collection:
tuples waiting in ports and rings, batches on their way between processes,
outputs parked in a reorder buffer are still alive when it comes, so every
collection walks them again, and some survive into the older generations that
later full collections walk. A two-process ``bench keyed`` run made ~290 young
collections in the parent alone (0.035–0.09 s, of a 2.3 s run; more when a full
collection fell into it). With a threshold of 30,000 it makes ~10 (0.02–0.04 s),
and the share of the cores the user's function had went from 0.901 to 0.906 in
one comparison and from 0.883 to 0.921 in another, on a slower phase of the VM
(medians of 10 interleaved runs each, parent and worker both raised).

Only the youngest generation's threshold changes; the older ones and
:func:`gc.collect` work as before, so cycles are still collected — later.

Results that are kept are a second cost: every tuple a sink like
:class:`~elastream.ops.sinks.Collect` keeps is walked by one young collection
before CPython sees that it holds only atomic values and stops tracking it
(200,000 kept outputs: 0.014–0.04 s of the parent's collections in that run,
under 1 ms with the outputs discarded).
:func:`~elastream.operators.untrack.untrack_atomic` (re-exported here) makes
that same test when the sink takes the tuples, while they are still in the
cache; it lives in the operator API so that sinks need not import the runtime.

How
---
:func:`relax` raises the threshold for as long as some run in this process
holds it, :func:`restore` gives it back, and the last run out restores what
was there before the first one came in (runs may overlap in one process).
A worker process of a multi-process run keeps the raised value until it ends.
"""

from __future__ import annotations

import gc
import threading

from elastream.operators.untrack import extension_untrack, untrack_atomic

__all__ = ["RUN_THRESHOLD", "relax", "restore", "untrack_atomic"]

#: The C extension's function, None when built without it.
_untrack_atomic = extension_untrack()

#: Young-generation threshold while a run is on (``Runner(gc_threshold=...)``; CPython's default is 700).
RUN_THRESHOLD = 30_000

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, ...] | None = None


def relax(threshold: int | None) -> bool:
    """Raise the young-generation threshold to at least ``threshold`` for one run; False when left alone.

    ``None`` (or a value not above the current one) leaves the collector as it is.
    Every True must be paired with one :func:`restore`.

    Example::

        if relax(30_000):
            try:
                ...  # the run
            finally:
                restore()
    """
    global _holders, _saved
    if threshold is None:
        return False
    with _lock:
        current = gc.get_threshold()
        if _holders == 0:
            if threshold <= current[0]:
                return False
            _saved = current
            gc.set_threshold(int(threshold), *current[1:])
        _holders += 1
        return True


def restore() -> None:
    """End one :func:`relax` that returned True; the last one restores the thresholds found by the first."""
    global _holders, _saved
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
