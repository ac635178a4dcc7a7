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
  replica's pieces (up to :data:`HOLD` of its window) and keeps feeding the others;
* stateless operators: sends each batch to the replica whose backlog is the
  smallest fraction of its window (join-shortest-queue) instead of blind
  round-robin;
* partitioned operators: moves partitions, *with their keys' state*, from the
  replica whose backlog stays fullest to the one that runs towards empty
  (:class:`FillMeter`, :func:`choose_moves`).
  Replicas run at different speeds whenever their processes do (other work in
  the same process, a core shared with other programs), and a static
  partition table cannot follow that.

A move of partition ``p`` from replica ``a`` to ``b``:

1. the split stops routing ``p`` (its new tuples are held, with their serial
   numbers) and sends ``a`` an export request behind ``p``'s last tuples;
2. ``a``, in stream order, removes ``p``'s keys from its operator's per-key
   state and returns them through the merge (:func:`keyed_state`);
3. the split sends the state to ``b``, then the held tuples; from then on
   ``p`` goes to ``b``.

Output order is unaffected: tuples keep their ``(seq, offset)`` and the merge
releases batches by serial number (a batch waits for its held part).

Threading model: the split and the merge each run in one worker thread at a
time; they only exchange plain counters (single-writer list slots) and a dict
of states in transit (one writer per key, read after the write), which the
GIL makes safe without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Seconds of replica work the split lets each replica have in hand.
WINDOW_S = 0.2
#: Backlog bound of a replica that has finished nothing yet: START_S of the others' measured work (its
#: process may still be starting, and the others should not wait for it), or START_WINDOW tuples while
#: nothing is measured at all; then the bounds once its own cost is known.
START_S = 0.05
START_WINDOW = 256
MIN_WINDOW = 8
MAX_WINDOW = 1 << 18
#: Moves start when two replicas' mean backlog fill (over a decision period) differs by at least GAP;
#: they take away about GAIN × gap of the fuller replica's recent load.
GAP = 0.15
GAIN = 0.35
#: How long a throttled split sleeps before it looks again.
THROTTLE_S = 0.002
#: A split that waited for a full backlog resumes when it is down to this fraction of the window.
RESUME = 0.5
#: A keyed split queues at most HOLD of a replica's window for a replica whose backlog is full (so the
#: others keep working meanwhile), then waits.
HOLD = 0.5


class SplitMergeLink:
    """What a split and its merge in the same process share.

    ``sent`` is written by the split, ``done`` / ``busy_s`` / ``states`` by the merge.
    """

    def __init__(self, replicas: int):
        self.sent = [0] * replicas
        self.done = [0] * replicas
        self.busy_s = [0.0] * replicas
        self.states: dict[int, dict] = {}

    def backlog(self) -> list[int]:
        """Tuples sent to each replica whose outputs have not reached the merge yet."""
        return [s - d for s, d in zip(self.sent, self.done)]

    def cost_per_tuple(self) -> float | None:
        """Mean measured replica seconds per input tuple (None before any finished)."""
        done, busy = sum(self.done), sum(self.busy_s)
        return busy / done if done and busy else None

    def windows(self) -> list[int]:
        """Backlog bound per replica: about :data:`WINDOW_S` of its measured work, within fixed limits."""
        mean = self.cost_per_tuple()
        start = START_WINDOW if mean is None else _bounded(START_S / mean)
        return [_bounded(WINDOW_S * done / busy) if done and busy else start
                for done, busy in zip(self.done, self.busy_s)]

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


class FillMeter:
    """Each replica's mean backlog fill (backlog / window) over a decision period.

    Fill is the one signal that needs no guess about *why* a replica is slow:
    a replica whose process also runs other operators, or shares its core,
    drains its backlog more slowly than it is refilled and its fill stays
    high, while one with time to spare runs towards empty. Throughput
    samples cannot tell a slow replica from a starved one.
    """

    def __init__(self, replicas: int):
        self._sums = [0.0] * replicas
        self._samples = 0

    def observe(self, fill: list[float]) -> None:
        """Add one sample of every replica's fill."""
        self._sums = [a + min(f, 1.0) for a, f in zip(self._sums, fill)]
        self._samples += 1

    def take(self) -> list[float] | None:
        """The mean fills since the last call (None without samples); starts a new period."""
        if not self._samples:
            return None
        means = [a / self._samples for a in self._sums]
        self._sums = [0.0] * len(self._sums)
        self._samples = 0
        return means


def choose_moves(mean_fill: list[float], table: list[int], load: list[int]) -> list[tuple[int, int, int]]:
    """Partitions to move now, as ``(partition, source, target)`` triples (possibly none).

    When the fullest replica's mean fill exceeds the emptiest one's by at
    least :data:`GAP`, partitions go from the fullest to the emptiest, largest
    first, while they fit in a budget of ``GAIN × gap`` of the source's recent
    load (a proportional step: a small gap moves little, so the split does not
    overshoot and swing back); the source always keeps its largest partition.
    If nothing fits but the gap is twice GAP, the source's smallest partition moves.

    Example: ``choose_moves([0.9, 0.1], [0, 0, 0, 0, 1], [10] * 5)`` → ``[(1, 0, 1)]``
    """
    replicas = range(len(mean_fill))
    source = max(replicas, key=mean_fill.__getitem__)
    target = min(replicas, key=mean_fill.__getitem__)
    gap = mean_fill[source] - mean_fill[target]
    if source == target or gap < GAP:
        return []
    owned = sorted((p for p, r in enumerate(table) if r == source and load[p] > 0), key=lambda p: (-load[p], p))
    if len(owned) < 2:
        return []
    budget = GAIN * gap * sum(load[p] for p in owned)
    moves = []
    for p in owned[1:]:
        if load[p] <= budget:
            moves.append((p, source, target))
            budget -= load[p]
    if not moves and gap >= 2 * GAP:
        moves.append((owned[-1], source, target))
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
