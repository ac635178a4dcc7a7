"""Load balancing between the replicas of an ordered split/merge (C-Stream §4.2), and partition moves.

Role
----
When an :class:`~elastream.ordered.split_merge.OrderedSplit` and its
:class:`~elastream.ordered.split_merge.OrderedMerge` run in the same process
they share a :class:`SplitMergeLink`. The merge reports, per replica, how many
input tuples it has finished and how long they took; the split then knows each
replica's backlog (tuples sent and not yet finished) and

* bounds the backlog of every replica to about :data:`WINDOW_S` seconds of
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
  run sooner (:meth:`~elastream.ordered.split_merge.OrderedSplit._balance_end`):
  the last pieces are not spread by a decision taken a window earlier.

A move of partition ``p`` from replica ``a`` to ``b``:

1. the split stops routing ``p`` (its new tuples are held, with their serial
   numbers), takes ``p``'s tuples out of the pieces still queued for ``a``
   (held too, ahead of the new ones) and sends ``a`` an export request right
   behind what ``a`` has been sent already — so a move waits for ``a``'s
   window, not for its queue;
2. ``a``, in stream order, removes ``p``'s keys from its operator's per-key
   state and returns them through the merge (:func:`keyed_state`);
3. the split sends the state to ``b``, then the held tuples; from then on
   ``p`` goes to ``b``.

Output order is unaffected: tuples keep their ``(seq, offset)`` and the merge
releases batches by serial number (a batch waits for its held part: it is
whole once the offsets of its pieces add up to its size).

Threading model: the split and the merge each run in one worker thread at a
time; they only exchange plain counters (single-writer list slots) and a dict
of states in transit (one writer per key, read after the write), which the
GIL makes safe without locks.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

#: Seconds of replica work the split lets each replica have in hand: enough to bridge the time until
#: the split runs again and its pieces arrive (a replica in another process), or just until the split
#: runs again (a *local* replica, in the split's own process). What a replica has in hand when the input
#: ends is the run's tail, and the next move of its partitions waits behind it: no more than needed.
#: The replicas should run dry together, so the windows differ by what the backlog of a replica in
#: another process counts on top of its work in hand: outputs on their way back, counted only when the
#: merge next runs (about one activation of the split's worker, ~PIECE_S-2*PIECE_S). They scale with
#: PIECE_S (about five pieces and three in flight): with 0.04 s pieces, 0.20 / 0.12 gave the function's
#: replicas 0.939 of both cores against 0.926 with 0.02 s pieces and 0.12 / 0.08 (``bench keyed``, two
#: processes, median of 16 interleaved runs each; 0.16 / 0.10 gave 0.932, 0.24 / 0.14 0.943). This is
#: also the latency the replicated operator adds at full load: a tuple waits behind its replica's window.
WINDOW_S = 0.20
LOCAL_WINDOW_S = 0.12
#: Backlog bound of a replica that has finished nothing yet: START_S of the others' measured work (its
#: process may still be starting, and the others should not wait for it), or START_WINDOW tuples while
#: nothing is measured at all; then the bounds once its own cost is known.
START_S = 0.05
START_WINDOW = 256
MIN_WINDOW = 8
MAX_WINDOW = 1 << 18
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


class SplitMergeLink:
    """What a split and its merge in the same process share.

    ``sent`` and ``key_order`` are written by the split, ``done`` / ``busy_s`` / ``states`` by the merge.
    ``key_order`` holds the keys in the order the split first saw them (a dict used as an ordered set):
    the merge puts the replicas' end-of-stream outputs in that order. ``local`` names the replicas that
    run in the split's own process. ``window_s`` is a remote replica's window (default
    :data:`WINDOW_S`); a local one's and the split's pieces keep their proportions to it.
    """

    def __init__(self, replicas: int, local: Collection[int] = (), window_s: float | None = None):
        window_s = WINDOW_S if window_s is None else float(window_s)
        if not window_s > 0:
            raise ValueError(f"a replica's window must be a positive number of seconds, got {window_s!r}")
        self.sent = [0] * replicas
        self.done = [0] * replicas
        self.busy_s = [0.0] * replicas
        self.states: dict[int, dict] = {}
        self.key_order: dict[Any, None] = {}
        #: The windows and the split's pieces scale with ``window_s`` (``Runner(replica_window_ms=...)``).
        self.scale = window_s / WINDOW_S
        self._window_s = [(LOCAL_WINDOW_S if r in local else WINDOW_S) * self.scale for r in range(replicas)]

    def backlog(self) -> list[int]:
        """Tuples sent to each replica whose outputs have not reached the merge yet."""
        return [s - d for s, d in zip(self.sent, self.done)]

    def cost_per_tuple(self) -> float | None:
        """Mean measured replica seconds per input tuple (None before any finished)."""
        done, busy = sum(self.done), sum(self.busy_s)
        return busy / done if done and busy else None

    def windows(self) -> list[int]:
        """Backlog bound per replica: about :data:`WINDOW_S` (:data:`LOCAL_WINDOW_S` for a replica in the
        split's process) of its measured work, within fixed limits."""
        mean = self.cost_per_tuple()
        start = START_WINDOW if mean is None else _bounded(START_S / mean)
        return [_bounded(window_s * done / busy) if done and busy else start
                for window_s, done, busy in zip(self._window_s, self.done, self.busy_s)]

    def fill(self) -> list[float]:
        """Each replica's backlog as a fraction of its window (1.0: full, the split waits for it)."""
        return [b / w for b, w in zip(self.backlog(), self.windows())]


def _bounded(tuples: float) -> int:
    return max(MIN_WINDOW, min(MAX_WINDOW, int(tuples)))


@dataclass(slots=True)
class Move:
    """A partition on its way from replica ``source`` to replica ``target``."""

    partition: int
    source: int
    target: int
    held: list[tuple] = field(default_factory=list)
    """Pieces of the partition's tuples that arrived meanwhile, in order: sent to ``target`` after the state."""


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


def choose_moves(rates: list[float | None], table: list[int], load: list[int]) -> list[tuple[int, int, int]]:
    """Partitions to move now, as ``(partition, source, target)`` triples (possibly none).

    Replica ``r`` should carry ``rates[r] / sum(rates)`` of the recent
    ``load``. When the replica with the most excess carries at least
    :data:`SLACK` of the load too much, its partitions go to the replica with
    the least, largest first, each only while it brings the two closer to
    their shares (so one move overshoots by less than one partition — below
    SLACK, and nothing swings back); the source keeps at least one partition.
    Nothing moves while a rate is unknown.

    Example: ``choose_moves([1.0, 3.0], [0, 0, 0, 1], [10] * 4)`` → ``[(1, 0, 1), (2, 0, 1)]``
    """
    if not rates or any(r is None or r <= 0 for r in rates):
        return []
    owned = [0] * len(rates)
    for p, r in enumerate(table):
        if r >= 0:
            owned[r] += load[p]
    total, capacity = sum(owned), sum(rates)  # type: ignore[arg-type]
    if total <= 0:
        return []
    excess = [owned[r] - total * rate / capacity for r, rate in enumerate(rates)]  # type: ignore[operator]
    source = max(range(len(rates)), key=excess.__getitem__)
    target = min(range(len(rates)), key=excess.__getitem__)
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


def _state_attribute(op: Any) -> str | None:
    """Name of the attribute holding ``op``'s per-key state dict, if known."""
    from elastream.ops.keyed import KeyedProcess, KeyedReduce

    declared = getattr(op, "keyed_state_attribute", None)
    if declared is not None:
        return str(declared)
    return {KeyedProcess: "states", KeyedReduce: "acc"}.get(type(op))


def keyed_state(op: Any) -> dict | None:
    """The dict of per-key state of a partitioned operator, or None if it keeps none we know of.

    ``KeyedProcess`` (``states``) and ``KeyedReduce`` (``acc``) are known;
    another operator opts in by naming its dict attribute in
    ``keyed_state_attribute``. Only operators with a known state can have
    partitions moved between replicas.
    """
    name = _state_attribute(op)
    state = getattr(op, name, None) if name is not None else None
    return state if isinstance(state, dict) else None


def supports_moves(op: Any) -> bool:
    """True when partitions of ``op`` can move between replicas (its per-key state is reachable)."""
    return _state_attribute(op) is not None
