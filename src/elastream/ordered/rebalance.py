"""Load balancing between the replicas of an ordered split/merge (C-Stream §4.2), and partition moves.

Role
----
When an :class:`~elastream.ordered.split_merge.OrderedSplit` and its
:class:`~elastream.ordered.split_merge.OrderedMerge` run in the same process
they share a :class:`SplitMergeLink`. The merge reports, per replica, how many
input tuples it has finished and how long they took; the split then knows each
replica's backlog (tuples sent and not yet finished) and

* bounds the backlog of every replica to about :data:`~elastream.ordered.link.WINDOW_S` seconds of
  *that replica's* work, so it does not push the whole input out at the start
  (what has been sent can no longer be balanced); a keyed split queues a full
  replica's pieces and keeps feeding the others (it waits when every queue
  holds :data:`HOLD` of its replica's window, or one holds :data:`QUEUE_CAP`
  windows);
* stateless operators: sends each batch to the replica whose backlog is the
  smallest fraction of its window (join-shortest-queue) instead of blind
  round-robin;
* partitioned operators: moves partitions, *with their keys' state*, so that
  each replica's share of the recent load follows its share of the measured
  capacity — its processing rate in wall-clock time while it had work in hand
  (:class:`RateMeter`, :func:`choose_moves`). Replicas run at different speeds
  whenever their processes do (other work in the same process, such as the
  split and the merge themselves, a core shared with other programs), and a
  static partition table cannot follow that;
* once the input has ended, moves queued partitions from the replica that
  would finish last to the one that would finish first, while that ends the
  run sooner (:meth:`SplitBalancing._balance_end`):
  the last pieces are not spread by a decision taken a window earlier.

A move of partition ``p`` from replica ``a`` to ``b``:

1. the split stops routing ``p`` (its new tuples are held, with their serial
   numbers), takes ``p``'s tuples out of the pieces still queued for ``a``
   (held too, ahead of the new ones) and sends ``a`` an export request ahead
   of what it still queues for ``a``;
2. ``a`` answers the request as soon as it finishes the piece (or 10 ms slice)
   in hand, not in stream order: it takes ``p``'s tuples out of what its input port holds ahead
   of the request (:mod:`elastream.ordered.early_export`), removes the state of
   ``p``'s keys from its operator (``export_state`` of key group ``p``: a keyed
   split's partitions are the operator's key groups) and returns both through
   the merge; what is still on its way to ``a`` (a ring to another process)
   reaches the port first;
3. the split sends the state to ``b``, then the tuples ``a`` handed back, then
   the held ones; from then on ``p`` goes to ``b``.

Output order is unaffected: tuples keep their ``(seq, offset)`` and the merge
releases batches by serial number (a batch waits for its held part: it is
whole once the offsets of its pieces add up to its size).

The split's side of all this is :class:`SplitBalancing`, a mix-in of
:class:`~elastream.ordered.split.OrderedSplit`.

Threading model: the split and the merge each run in one worker thread at a
time; they only exchange plain counters (single-writer list slots) and a dict
of states in transit (one writer per key, read after the write), which the
GIL makes safe without locks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from elastream.ordered.active_moves import handover_moves, joining_moves
from elastream.ordered.link import SplitMergeLink
from elastream.ordered.routing import cut_by_key
from elastream.ordered.wire import EXPORT_SEQ, IMPORT_SEQ, in_batch

#: A replica's rate counts only over sampling intervals that it began and ended with at least BUSY of
#: its window in hand: a replica that ran dry (or was held back) says nothing about its speed.
BUSY = 0.25
#: Each decision period's rate sample weighs RATE_WEIGHT against the earlier estimate (exponential average).
RATE_WEIGHT = 0.5
#: Moves start when a replica carries more than its capacity share of the recent load by at least SLACK
#: of that load (above one partition's share of a typical table, so that the rounding of one move never
#: calls for a move back).
SLACK = 0.025
#: How long a throttled split sleeps before it looks again.
THROTTLE_S = 0.002
#: A split that waited for a full backlog resumes when it is down to this fraction of the window.
RESUME = 0.5
#: A keyed split queues the pieces of a replica whose backlog is full and keeps feeding the others; it
#: waits when every replica's queue holds HOLD of its window, or one queue holds QUEUE_CAP windows (a
#: bound on memory and latency: moves, which take a partition's queued tuples along, even out the rest).
#: Waiting for the one full queue alone (QUEUE_CAP = HOLD) left the other replica without input whenever
#: one ran slow for a moment: ``bench keyed`` P=2, 24 interleaved runs each, with the end balancing,
#: took the function's replicas from 0.9245 to 0.9415 of both cores (idle 0.074 -> 0.037 s per run).
HOLD = 0.5
QUEUE_CAP = 2.0
#: How often (seconds) a split with a link samples its replicas' throughput, and decides on moves.
CHECK_S = 0.01
DECIDE_S = 0.2
#: Once the input has ended, the split looks for moves every CHECK_S, or END_RECHECK_S after it found none
#: worth making (each look counts the tuples in a queue by partition).
END_RECHECK_S = 0.05


@dataclass(slots=True)
class Move:
    """A partition on its way from replica ``source`` to replica ``target``."""

    partition: int
    source: int
    target: int
    held: list[tuple] = field(default_factory=list)
    """Pieces of the partition's tuples that arrived meanwhile, in order: sent to ``target`` after the state."""
    started: float = field(default_factory=perf_counter)
    """When the partition stopped being routed (its tuples are held from then until its state arrives)."""


class RateMeter:
    """Each replica's capacity: tuples finished per second of wall-clock time while it had work in hand.

    Wall-clock time, so that whatever slows a replica counts — other operators
    of its process (the split and the merge beside a local replica), a core
    shared with other programs. Intervals in which a replica may have run dry
    do not count (a starved replica's throughput says nothing about its
    speed). A replica that had work in hand for less than half of a period —
    one starved because the split waits for a slower one — is measured by its
    own processing time instead (``busy_s``: its speed alone, an upper bound
    of its capacity, enough to see that it can take more). Each period's rate
    is folded into an exponential average, which survives moves: capacity
    belongs to the replica, not to its partitions.
    """

    def __init__(self, replicas: int):
        # (time, done, busy, busy_s) of the latest sample, and (time, done, busy_s) when the period began.
        self._last: tuple[float, list[int], list[bool], list[float]] | None = None
        self._start: tuple[float, list[int], list[float]] | None = None
        self._tuples = [0] * replicas
        self._seconds = [0.0] * replicas
        self.rates: list[float | None] = [None] * replicas

    def observe(self, now: float, done: list[int], busy: list[bool], busy_s: list[float]) -> None:
        """One sample: tuples finished so far per replica, which replicas have enough in hand to stay
        busy, and each replica's processing seconds so far."""
        if self._last is not None:
            then, before, was_busy, _ = self._last
            for r, (d, b) in enumerate(zip(done, busy)):
                if b and was_busy[r]:
                    self._tuples[r] += d - before[r]
                    self._seconds[r] += now - then
        else:
            self._start = (now, list(done), list(busy_s))
        self._last = (now, list(done), list(busy), list(busy_s))

    def update(self) -> list[float | None]:
        """Fold the period's samples into the estimates and start a new period; return the estimates."""
        if self._last is None or self._start is None:
            return list(self.rates)
        now, done, _, busy_s = self._last
        began, done0, busy_s0 = self._start
        for r, seconds in enumerate(self._seconds):
            if self._tuples[r] > 0 and seconds >= (now - began) / 2:
                self._fold(r, self._tuples[r] / seconds)
            elif done[r] > done0[r] and busy_s[r] > busy_s0[r]:
                self._fold(r, (done[r] - done0[r]) / (busy_s[r] - busy_s0[r]))
        self._start = (now, list(done), list(busy_s))
        self._tuples = [0] * len(self._tuples)
        self._seconds = [0.0] * len(self._seconds)
        return list(self.rates)

    def _fold(self, r: int, sample: float) -> None:
        old = self.rates[r]
        self.rates[r] = sample if old is None else RATE_WEIGHT * sample + (1 - RATE_WEIGHT) * old


def choose_moves(rates: list[float | None], table: list[int], load: list[int],
                 active: Collection[int] | None = None) -> list[tuple[int, int, int]]:
    """Partitions to move now, as ``(partition, source, target)`` triples (possibly none).

    Replica ``r`` of ``active`` (default: every replica) should carry
    ``rates[r] / sum(rates)`` of the recent ``load``. When the replica with
    the most excess carries at least :data:`SLACK` of the load too much, its
    partitions go to the replica with the least, largest first, each only
    while it brings the two closer to their shares (so one move overshoots by
    less than one partition — below SLACK, and nothing swings back); the
    source keeps at least one partition. Nothing moves while an active
    replica's rate is unknown.

    Example: ``choose_moves([1.0, 3.0], [0, 0, 0, 1], [10] * 4)`` → ``[(1, 0, 1), (2, 0, 1)]``
    """
    chosen = list(range(len(rates))) if active is None else sorted(active)
    if not chosen or any(rates[r] is None or rates[r] <= 0 for r in chosen):  # type: ignore[operator]
        return []
    owned = [0] * len(rates)
    for p, r in enumerate(table):
        if r >= 0:
            owned[r] += load[p]
    total, capacity = sum(owned[r] for r in chosen), sum(rates[r] for r in chosen)  # type: ignore[misc]
    if total <= 0:
        return []
    excess = {r: owned[r] - total * rates[r] / capacity for r in chosen}  # type: ignore[operator]
    source = max(chosen, key=excess.__getitem__)
    target = min(chosen, key=excess.__getitem__)
    budget = min(excess[source], -excess[target])
    if source == target or budget < SLACK * total:
        return []
    candidates = sorted((p for p, r in enumerate(table) if r == source and load[p] > 0), key=lambda p: (-load[p], p))
    moves = []
    for p in candidates[1:]:
        if load[p] < 2 * budget:  # then |budget - load| < budget: the shares get closer
            moves.append((p, source, target))
            budget -= load[p]
    return moves


class SplitBalancing:
    """The balancing half of a keyed :class:`~elastream.ordered.split.OrderedSplit` with a link: partition moves.

    A mix-in: the split owns every attribute below and calls :meth:`_balance`
    while its input runs, :meth:`_balance_end` once it has ended, and
    :meth:`_deliver_states` whenever it may send. Runs in the split's worker only.
    """

    link: SplitMergeLink | None
    key: Callable[[Any], Any] | None
    partitions: int
    table: list[int]
    moves_done: int
    _moves: dict[int, Move]
    _load: list[int]
    _meter: RateMeter
    _queues: list[deque] | None
    _queued: list[int]
    _direction: tuple[int, int] | None
    _next_check: float
    _next_decision: float
    _active: list[int]
    _requested: list[int] | None
    longest_hold_s: float

    def _enqueue(self, r: int, msg: tuple, tuples: int) -> None:
        raise NotImplementedError

    async def _flush(self, outs: list) -> None:
        raise NotImplementedError

    async def _deliver_states(self, outs: list) -> None:
        """Send each key group's state that came back through the merge to its target, then the tuples its
        replica handed back, then its held ones (the stream's order)."""
        link = self.link
        states = link.states  # type: ignore[union-attr]
        for p in [p for p in self._moves if p in states]:
            move = self._moves.pop(p)
            self.longest_hold_s = max(self.longest_hold_s, perf_counter() - move.started)
            self._enqueue(move.target, (IMPORT_SEQ, p, states.pop(p)), 0)
            returned = link.returned.pop(p, [])  # type: ignore[union-attr]
            link.sent[move.source] -= sum(len(piece[3]) for piece in returned)  # type: ignore[union-attr]
            for piece in returned + move.held:
                self._enqueue(move.target, piece, len(piece[3]))
            self.table[p] = move.target
            self.moves_done += 1
            if not self._moves:  # the load shares the moves set up show from the next period on
                self._next_decision = perf_counter() + DECIDE_S

    async def _balance(self, outs: list) -> None:
        """Sample the replicas' progress every CHECK_S; every DECIDE_S, start the moves their rates call for.

        No decision while a move is still on its way (its tuples are held), nor
        on an imbalance seen only once (one period's rates may be a burst).
        """
        if self._requested is not None and not self._moves:
            self._apply_active(self._requested)
            await self._flush(outs)
        now = perf_counter()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_S
        link = self.link
        if not all(link.done[r] for r in self._active):  # type: ignore[union-attr]
            # A replica still starting (its process booting) has no rate yet: judge only once all run.
            self._next_decision = now + DECIDE_S
            return
        windows = link.windows()  # type: ignore[union-attr]
        in_hand = [b >= BUSY * w for b, w in zip(link.backlog(), windows)]  # type: ignore[union-attr]
        self._meter.observe(now, link.done, in_hand, link.busy_s)  # type: ignore[union-attr]
        if now < self._next_decision or self._moves:
            return
        self._next_decision = now + DECIDE_S
        moves = choose_moves(self._meter.update(), self.table, self._load, self._active)
        self._load = [n // 2 for n in self._load]  # recent load: older tuples count less at every decision
        direction = (moves[0][1], moves[0][2]) if moves else None
        moves, self._direction = (moves if direction is not None and direction == self._direction else []), direction
        if moves:
            self._start_moves(moves)
            await self._flush(outs)

    def _apply_active(self, active: list[int]) -> None:
        """Make ``active`` the replicas that own key groups: those leaving hand theirs over, those joining
        get their share at once (their key groups' state moves with them, as in any move)."""
        before, self._active, self._requested = self._active, active, None
        moves = [m for r in before if r not in active for m in handover_moves(self.table, self._load, r, active)]
        joining = [r for r in active if r not in before]
        if joining:
            moves += joining_moves(self._meter.rates, self.table, self._load, joining, active)
        for source in sorted({m[1] for m in moves}):
            self._start_moves([m for m in moves if m[1] == source])
        self._direction = None
        self._next_decision = perf_counter() + DECIDE_S

    def _balance_end(self) -> None:
        """Once the input has ended: move queued partitions from the replica that would finish last to the
        one that would finish first, while that brings the end of the run closer.

        Each replica's finish is its backlog and queue at its measured rate. A moved partition takes along
        its queued tuples and those its source has not processed yet (handed back with the state,
        :mod:`elastream.ordered.early_export`; counted as the partition's share of the source's recent
        load); each partition moves only if the later of the two finishes gets earlier.
        """
        now = perf_counter()
        measured, active = self._meter.rates, self._active
        if now < self._next_check or len(active) < 2 or any(not measured[r] for r in active):
            return
        self._next_check = now + CHECK_S
        rates = [float(r or 0.0) for r in measured]
        backlog = self.link.backlog()  # type: ignore[union-attr]
        finish = {r: (backlog[r] + self._queued[r]) / rates[r] for r in active}
        source = max(active, key=finish.__getitem__)
        target = min(active, key=finish.__getitem__)
        if finish[source] - finish[target] < CHECK_S or not (self._queued[source] or backlog[source]):
            return
        queued = self._left_by_partition(source, backlog[source])
        rs, rt = rates[source], rates[target]
        fs, ft = finish[source], finish[target]
        moves = []
        for p in sorted((p for p, n in enumerate(queued) if n), key=lambda p: -queued[p]):
            n = queued[p]
            if max(fs - n / rs, ft + n / rt) < max(fs, ft):
                moves.append((p, source, target))
                fs, ft = fs - n / rs, ft + n / rt
        if moves:
            self._start_moves(moves)
        else:  # the queue was counted for nothing: look again later
            self._next_check = now + END_RECHECK_S

    def _left_by_partition(self, replica: int, backlog: int) -> list[float]:
        """Tuples per partition a move out of ``replica`` would take along: its queue's, and its share of
        the ``backlog`` sent and not processed (by the partitions' recent load)."""
        left: list[float] = list(self._queued_by_partition(replica))
        owned = [p for p, r in enumerate(self.table) if r == replica]
        recent = sum(self._load[p] for p in owned)
        for p in owned if recent else ():
            left[p] += backlog * self._load[p] / recent
        return left

    def _queued_by_partition(self, replica: int) -> list[int]:
        """Tuples per partition in ``replica``'s queue."""
        counts = [0] * self.partitions
        one_replica = [0] * self.partitions  # only the counts matter
        for msg, _ in self._queues[replica]:  # type: ignore[index]
            if msg[0] >= 0:
                cut_by_key(msg[3], self.key, one_replica, self.partitions, 1, counts)  # type: ignore[arg-type]
        return counts

    def _start_moves(self, moves: list[tuple[int, int, int]]) -> None:
        """Start moves ``(partition, source, target)`` that all leave one source."""
        starting = {p: Move(p, source, target) for p, source, target in moves}
        for p in starting:
            self.table[p] = -1  # held: this partition's new tuples wait for its state to reach the target
        self._moves.update(starting)
        self._take_from_queue(moves[0][1], starting)

    def _take_from_queue(self, source: int, moving: dict[int, Move]) -> None:
        """For moves out of ``source``: take the moving partitions' tuples out of its queue, to follow
        their state, and queue their export requests ahead of its data.

        The export then waits only for what ``source`` has been sent already, not for its whole queue
        (moves take effect sooner, and the split may queue more for a slow replica). It stays behind
        an import of its own partition still queued there (a partition that arrived and leaves again
        must arrive first), and only that one: behind an import of another partition, queued after
        many pieces, it waited for those pieces to go out at the window's pace (holds of 0.2-0.4 s).
        The tuples taken out go first into each move's ``held`` pieces, in order, with their batch's
        serial number, size and offsets: the merge completes a batch from any number of pieces.
        """
        table = [-1 if p in moving else 0 for p in range(self.partitions)]
        queue: deque = deque()
        imported: dict[int, int] = {}  # a moving partition's import still queued: the queue's length after it
        for msg, tuples in self._queues[source]:  # type: ignore[index]
            if msg[0] < 0:
                queue.append((msg, tuples))
                if msg[0] == IMPORT_SEQ and msg[1] in moving:
                    imported[msg[1]] = len(queue)
                continue
            seq, size, offsets, items = msg
            kept, local, taken = cut_by_key(items, self.key, table, self.partitions, 1)  # type: ignore[arg-type]
            if not taken:
                queue.append((msg, tuples))
                continue
            for p, (offs, xs) in taken.items():
                moving[p].held.append((seq, size, in_batch(offsets, offs), xs))
            if kept[0]:
                queue.append(((seq, size, in_batch(offsets, local[0]), kept[0]), len(kept[0])))
            self._queued[source] -= tuples - len(kept[0])
        self._queues[source] = queue_exports(queue, moving, imported)  # type: ignore[index]


def queue_exports(queue: deque, moving: Collection[int], imported: dict[int, int]) -> deque:
    """``queue`` with an export request for each ``moving`` partition: at the front, or right after the
    import of that partition still queued (``imported``: the queue's length after it)."""
    out = deque(((EXPORT_SEQ, p), 0) for p in moving if p not in imported)
    after: dict[int, list[int]] = {}
    for p, length in imported.items():
        after.setdefault(length, []).append(p)
    for length, item in enumerate(queue, 1):
        out.append(item)
        out.extend(((EXPORT_SEQ, p), 0) for p in after.get(length, ()))
    return out
