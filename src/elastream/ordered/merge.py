"""The ordered merge behind an operator's replicas (C-Stream §4.2; reorder buffer of ordered-multicore §3).

:class:`OrderedMerge` has **one** input port that every replica publishes to
(C-Stream §4.2: "a single downstream input port subscribing to the output
ports of the replicas"). It reassembles each batch from its pieces by offset
(:func:`~elastream.ordered.routing.place`) and releases batches through the
reorder buffer (:func:`~elastream.ordered.reorder.make_reorder_buffer`),
strictly by ``seq``. Order is decided by serial numbers alone, never by
replica ids, so replicas may join or leave while the flow runs: the merge
never waits for a particular replica, only for the next serial. Messages are
those of :mod:`elastream.ordered.wire`.

Threading: one worker at a time runs the merge (it owns its reorder buffer);
with a :class:`~elastream.ordered.link.SplitMergeLink` it writes the
link's ``done`` / ``busy_s`` counters, ``states`` and ``returned`` (single writer each).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elastream.operators.base import FunctionOperator, Kind
from elastream.ordered.link import SplitMergeLink
from elastream.ordered.reorder import REORDER_SCHEMES, ReorderStats, make_reorder_buffer
from elastream.ordered.routing import place
from elastream.ordered.wire import END_SEQ, STATE_SEQ

#: Batches the merge's reorder buffer holds before it parks later ones aside.
DEFAULT_REORDER_CAPACITY = 4096
#: Tuples the merge's downstream port holds (its ``output_capacity``): one arriving piece may release
#: many parked batches at once, and the merge takes no input (so it reports no replica progress to the
#: split) while part of a release still waits for room downstream.
MERGE_OUTPUT_CAPACITY = 1 << 16


@dataclass(frozen=True, slots=True)
class MergeStats:
    """A snapshot of an :class:`OrderedMerge`."""

    reorder: ReorderStats | None
    partial_batches: int
    """Batches with some but not all of their pieces."""
    parked: int
    """Batches beyond the reorder window, waiting to be re-offered."""
    max_parked: int


class OrderedMerge(FunctionOperator):
    """Release replica outputs in the split's serial order through a reorder buffer (ordered §3).

    Every replica publishes to input port 0. A batch whose serial lies beyond
    the reorder window is parked (the paper's "keep it and retry later") and
    re-offered as the window moves; in-flight batches are bounded by the port
    and ring capacities upstream (and by the split's backlog bound when a
    ``link`` is shared), so parking is bounded too. End-of-input outputs follow
    every ordered output, replica by replica, or by key in the order the split
    first saw the keys (the link's ``key_order``).

    Example::

        merge = OrderedMerge(reorder="nonblocking", capacity=4096)
    """

    kind = Kind.STATEFUL  # one instance: it restores the order

    def __init__(self, reorder: str = "nonblocking", capacity: int = DEFAULT_REORDER_CAPACITY,
                 link: SplitMergeLink | None = None):
        if reorder not in REORDER_SCHEMES:
            raise ValueError(f"unknown reorder scheme {reorder!r}; choose one of {', '.join(REORDER_SCHEMES)}")
        super().__init__(inputs=1, outputs=1)
        self.reorder = reorder
        self.capacity = int(capacity)
        self.link = link
        self.output_capacity = MERGE_OUTPUT_CAPACITY
        self._rb: Any = None
        self._out: list = []
        self._partial: dict[int, list[tuple]] = {}
        self._parked: list[tuple[int, list]] = []
        self._max_parked = 0
        self._ends: dict[int, tuple[list, bool]] = {}

    def open(self, ctx) -> None:
        self._rb = make_reorder_buffer(self.reorder, self.capacity, self._emit)
        self._out, self._partial, self._parked, self._ends = [], {}, [], {}
        self._max_parked = 0

    def _emit(self, outputs: Sequence[Any]) -> None:
        self._out += outputs

    def on_batch(self, items: list, port: int) -> list:
        self._out = out = []
        partial, link = self._partial, self.link
        for msg in items:
            seq = msg[0]
            if seq < 0:
                self._control(msg)
                continue
            if link is not None:
                link.finished(msg[5], msg[6], msg[7])
            offsets = msg[2]
            if offsets is None:  # a whole batch
                self._offer(seq, _flat(msg[3], msg[4]))
                continue
            got = partial.get(seq)
            if got is None:
                got = partial[seq] = [0]  # tuples so far, then the pieces
            got.append(msg)
            got[0] += len(offsets)
            if got[0] == msg[1]:
                del partial[seq]
                self._offer(seq, _assemble(got[1:]))
        if self._parked:
            self._unpark()
        return out

    def _control(self, msg: tuple) -> None:
        if msg[0] == END_SEQ:
            self._ends[msg[1]] = (msg[2], len(msg) > 3 and msg[3])
        elif msg[0] == STATE_SEQ:
            if self.link is None:
                raise RuntimeError("ordered merge: a replica returned a partition's state but no split waits for it")
            # The pieces handed back first: the split reads them once it sees the state.
            self.link.returned[msg[2]] = msg[4]
            self.link.states[msg[2]] = msg[3]

    def _offer(self, seq: int, outputs: list) -> None:
        if not self._rb.try_add(seq, outputs):
            heapq.heappush(self._parked, (seq, outputs))
            self._max_parked = max(self._max_parked, len(self._parked))

    def _unpark(self) -> None:
        parked, rb = self._parked, self._rb
        while parked and parked[0][0] < rb.next_serial + rb.capacity:
            seq, outputs = heapq.heappop(parked)
            rb.try_add(seq, outputs)  # inside the window now: always accepted

    def on_inputs_closed(self) -> list | None:
        missing = self._rb.pending() + len(self._partial) + len(self._parked)
        if missing:
            raise RuntimeError(f"ordered merge: every replica ended but {missing} batches were never completed "
                               f"(next serial {self._rb.next_serial}); a piece was lost")
        final: list = []
        by_key: dict[Any, list] = {}
        for index in sorted(self._ends):
            outputs, keyed = self._ends[index]
            if keyed:
                by_key.update(outputs)  # a key's state, hence its end, lives in one replica only
            else:
                final += outputs
        return final + self._in_key_order(by_key) or None

    def _in_key_order(self, by_key: dict[Any, list]) -> list:
        """The replicas' end outputs by key, in the order the split first saw the keys."""
        if not by_key:
            return []
        order = self.link.key_order if self.link is not None else {}
        unknown = [k for k in by_key if k not in order]
        if unknown:
            raise RuntimeError(f"ordered merge: replicas ended keys the split never routed ({unknown[:3]}...); "
                               "an operator with on_end needs its split and merge in one process")
        out: list = []
        for k in order:
            emitted = by_key.get(k)
            if emitted:
                out += emitted
        return out

    def statistics(self) -> MergeStats:
        """A snapshot (exact when the merge is not running)."""
        return MergeStats(reorder=None if self._rb is None else self._rb.statistics(),
                          partial_batches=len(self._partial), parked=len(self._parked), max_parked=self._max_parked)

    def describe(self) -> str:
        return f"OrderedMerge({self.reorder}, {self.capacity})"


def _flat(outputs: list, nested: bool) -> list:
    if not nested:
        return outputs
    flat: list = []
    for group in outputs:
        flat += group
    return flat


def _assemble(pieces: list[tuple]) -> list:
    """The outputs of one batch in input order, from its pieces' offsets."""
    size = sum(len(p[2]) for p in pieces)
    slots: list = [None] * size
    nested = False
    for piece in pieces:
        nested = nested or piece[4]
        place(slots, piece[2], piece[3])
    if not nested:
        return slots
    # Mixed pieces cannot happen (all replicas run copies of one operator), so every slot is a list here.
    flat: list = []
    for group in slots:
        flat += group
    return flat
