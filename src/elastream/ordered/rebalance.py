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
  (what has been sent can no longer be balanced);
* stateless operators: sends each batch to the replica whose backlog is the
  smallest fraction of its window (join-shortest-queue) instead of blind
  round-robin;
* partitioned operators: moves a partition, *with its keys' state*, from a
  replica that holds the split back to one that runs dry (:func:`choose_move`).
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
#: Backlog bounds (tuples) while the per-tuple cost is unknown, and always.
START_WINDOW = 256
MIN_WINDOW = 8
MAX_WINDOW = 1 << 18
#: A move happens when the busiest replica holds at least HIGH × window and the idlest at most LOW × window.
HIGH, LOW = 0.75, 0.25
#: How long a throttled split sleeps before it looks again.
THROTTLE_S = 0.002
#: A split that waited for a full backlog resumes when it is down to this fraction of the window.
RESUME = 0.5


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
        return [START_WINDOW if not done or not busy else max(MIN_WINDOW, min(MAX_WINDOW, int(WINDOW_S * done / busy)))
                for done, busy in zip(self.done, self.busy_s)]

    def fill(self) -> list[float]:
        """Each replica's backlog as a fraction of its window (1.0: full, the split waits for it)."""
        return [b / w for b, w in zip(self.backlog(), self.windows())]


@dataclass(slots=True)
class Move:
    """A partition on its way from replica ``source`` to replica ``target``."""

    partition: int
    source: int
    target: int
    held: list[tuple] = field(default_factory=list)
    """Pieces of the partition's tuples that arrived meanwhile, in order: sent to ``target`` after the state."""


def choose_move(fill: list[float], table: list[int], load: list[int], moving_from: set[int],
                progressed: list[bool]) -> tuple[int, int, int] | None:
    """Which partition to move, as ``(partition, source, target)``, or None.

    ``fill`` is each replica's backlog over its window. Move when the fullest
    replica holds the split back (``>= HIGH``) while the emptiest is running
    dry (``<= LOW``), both have finished work already (a replica still
    starting looks slow), the source has no move in flight and keeps at least
    one other loaded partition. The partition is the source's median one by
    recent load, so one move shifts a typical share.

    Example: ``choose_move([0.9, 0.0], [0, 1, 0, 1], [5, 5, 5, 5], set(), [True, True])`` → ``(2, 0, 1)``
    """
    source = max(range(len(fill)), key=fill.__getitem__)
    target = min(range(len(fill)), key=fill.__getitem__)
    if source == target or source in moving_from or not (progressed[source] and progressed[target]):
        return None
    if fill[source] < HIGH or fill[target] > LOW:
        return None
    owned = sorted((p for p, r in enumerate(table) if r == source and load[p] > 0), key=lambda p: (load[p], p))
    if len(owned) < 2:
        return None
    return owned[len(owned) // 2], source, target


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
