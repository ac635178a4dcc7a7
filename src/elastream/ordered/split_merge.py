"""Ordered split / replica / merge: data parallelism with sequence numbers (C-Stream §4.2).

A stateless or partitioned function operator ``X`` whose work is spread over
several replicas (typically in different worker processes) is rewritten as::

    upstream -> X#split -> X#0 .. X#k-1 -> X#merge -> downstream

The parts live in their own modules; this one gathers their names (and every
name it had before the parts were split out):

* :mod:`~elastream.ordered.wire` — the messages between the three and their ``seq`` codes;
* :mod:`~elastream.ordered.routing` — the per-tuple kernels: the keyed cut of a batch by key group
  and the merge's reassembly of a piece (in C, :mod:`elastream.ordered._splitfast`, when built);
* :mod:`~elastream.ordered.split` — :class:`OrderedSplit`, serial numbers and routing;
* :mod:`~elastream.ordered.rebalance` — the split/merge link, rates and key-group moves;
* :mod:`~elastream.ordered.replica` — :class:`OrderedReplica`, one instance of ``X``;
* :mod:`~elastream.ordered.merge` — :class:`OrderedMerge`, release by serial through a reorder buffer;
* :mod:`~elastream.ordered.replicate` — the graph pass that rewrites a flow.

Serial numbers per batch rather than per tuple keep the per-tuple overhead to
a list slot: a stateless batch travels and is released as one unit, a
partitioned one costs one offset per tuple. Tuple order is exactly the
sequential order because a tuple's position is ``(seq, offset)``.

Threading: see each part; every operator here runs in one worker at a time.
"""

from __future__ import annotations

from elastream.ordered.merge import DEFAULT_REORDER_CAPACITY, MERGE_OUTPUT_CAPACITY, MergeStats, OrderedMerge
from elastream.ordered.rebalance import CHECK_S, DECIDE_S, END_RECHECK_S
from elastream.ordered.replica import OrderedReplica, is_one_to_one, replicable_kind
from elastream.ordered.routing import _splitfast, cut_by_key, cut_by_key_python, place, place_python
from elastream.ordered.split import DEFAULT_CHUNK, MAX_CHUNK, MIN_CHUNK, PIECE_S, OrderedSplit
from elastream.ordered.wire import END_SEQ, EXPORT_SEQ, IMPORT_SEQ, STATE_SEQ

__all__ = [
    "CHECK_S", "DECIDE_S", "DEFAULT_CHUNK", "DEFAULT_REORDER_CAPACITY", "END_RECHECK_S", "END_SEQ", "EXPORT_SEQ",
    "IMPORT_SEQ", "MAX_CHUNK", "MERGE_OUTPUT_CAPACITY", "MIN_CHUNK", "PIECE_S", "STATE_SEQ", "MergeStats",
    "OrderedMerge", "OrderedReplica", "OrderedSplit", "_splitfast", "cut_by_key", "cut_by_key_python",
    "is_one_to_one", "place", "place_python", "replicable_kind",
]
