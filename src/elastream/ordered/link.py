"""What an ordered split and its merge in the same process share: :class:`SplitMergeLink`.

The merge reports, per replica, how many input tuples it has finished and how
long they took (:meth:`SplitMergeLink.finished`); the split reads each replica's
backlog (tuples sent and not yet finished), its *window* — the backlog it may
have, about :data:`WINDOW_S` seconds of that replica's recent work — and the
cost per tuple that sizes its pieces. The balancing and the partition moves
built on this are :mod:`elastream.ordered.rebalance`.

Threading: the split and the merge each run in one worker thread at a time;
each list slot has one writer (the split writes ``sent`` and ``key_order``, the
merge the rest), which the GIL makes safe without locks.
"""

from __future__ import annotations

from collections.abc import Collection
from time import perf_counter
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
#: A local replica shares its process's threads with the split and every operator upstream of it, and
#: takes whatever thread time it is given: fed as readily as the others, it holds the threads while the
#: operators feeding every replica wait, and the replicas in other processes run dry. So a stateless split
#: feeds a local replica only once the others are this much fuller (a fraction of their windows).
LOCAL_BIAS = 0.5
#: Backlog bound of a replica that has finished nothing yet: START_S of the others' measured work (its
#: process may still be starting, and the others should not wait for it), or START_WINDOW tuples while
#: nothing is measured at all; then the bounds once its own cost is known.
START_S = 0.05
START_WINDOW = 256
MIN_WINDOW = 8
MAX_WINDOW = 1 << 18
#: Windows and pieces are sized by what a replica's recent tuples cost: the last RECENT_S/2-RECENT_S of its
#: work (:class:`RecentCost`). Sized by the mean since the start, a cost that rose 8x mid-run (IBM Fig. 10's
#: 5 -> 40 us) left the windows at the old cost's tuples: 40,000-60,000 tuples in flight, 3 s of the new
#: work, for as long as the run had lasted.
RECENT_S = 0.3


class RecentCost:
    """Tuples and the seconds they took over the last :data:`RECENT_S`/2 to :data:`RECENT_S` of some work.

    Two buckets: the newer one takes the counts, and once it holds RECENT_S/2 it replaces the older one
    whole. So after a change of cost nothing of the old one is left once RECENT_S of the new work is done.
    Halving both counters instead kept the old cheap tuples' *count* in the ratio: after a rise from 5 to
    40 us a tuple it read 14.5 us after 0.3 s of the new work and 32.8 us after 0.75 s (here: 40 us at 0.3 s).
    """

    __slots__ = ("_older", "_newer")

    def __init__(self) -> None:
        self._older = (0, 0.0)
        self._newer = (0, 0.0)

    def add(self, tuples: int, seconds: float) -> None:
        """``tuples`` more took ``seconds``."""
        done, took = self._newer[0] + tuples, self._newer[1] + seconds
        if took > RECENT_S / 2:
            self._older, self._newer = (done, took), (0, 0.0)
        else:
            self._newer = (done, took)

    def counts(self) -> tuple[int, float]:
        """(tuples, seconds) over the two buckets."""
        return self._older[0] + self._newer[0], self._older[1] + self._newer[1]


class SplitMergeLink:
    """What a split and its merge in the same process share.

    ``sent`` and ``key_order`` are written by the split, ``done`` / ``busy_s`` / ``states`` / ``returned``
    (a moving key group's pieces its replica handed back unprocessed) by the merge.
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
        self._recent = [RecentCost() for _ in range(replicas)]
        self.states: dict[int, dict] = {}
        self.returned: dict[int, list[tuple]] = {}
        self.key_order: dict[Any, None] = {}
        #: The windows and the split's pieces scale with ``window_s`` (``Runner(replica_window_ms=...)``).
        self.scale = window_s / WINDOW_S
        self._window_s = [(LOCAL_WINDOW_S if r in local else WINDOW_S) * self.scale for r in range(replicas)]
        self.local = frozenset(local)
        #: When each replica's backlog was last known exactly: its last finished tuples, or the split's send
        #: to it while it had nothing in hand (it has worked on its backlog since, at its measured cost).
        self.known_at = [0.0] * replicas

    def finished(self, replica: int, tuples: int, busy_s: float) -> None:
        """``replica`` finished ``tuples`` input tuples in ``busy_s`` of its processing time (the merge,
        on receiving their outputs)."""
        self.done[replica] += tuples
        self.known_at[replica] = perf_counter()
        self.busy_s[replica] += busy_s
        self._recent[replica].add(tuples, busy_s)

    def backlog(self) -> list[int]:
        """Tuples sent to each replica whose outputs have not reached the merge yet."""
        return [s - d for s, d in zip(self.sent, self.done)]

    def cost_per_tuple(self) -> float | None:
        """Measured replica seconds per input tuple, over the replicas' recent work (None before any finished)."""
        counts = [recent.counts() for recent in self._recent]
        done, busy = sum(n for n, _ in counts), sum(s for _, s in counts)
        return busy / done if done and busy else None

    def windows(self) -> list[int]:
        """Backlog bound per replica: about :data:`WINDOW_S` (:data:`LOCAL_WINDOW_S` for a replica in the
        split's process) of its measured work, within fixed limits."""
        counts = [recent.counts() for recent in self._recent]
        start = 0
        if not all(done and took for done, took in counts):  # only an unmeasured replica needs the others' mean
            mean = self.cost_per_tuple()
            start = START_WINDOW if mean is None else _bounded(START_S / mean)
        return [_bounded(window_s * done / took) if done and took else start
                for window_s, (done, took) in zip(self._window_s, counts)]

    def fill(self) -> list[float]:
        """Each replica's backlog as a fraction of its window (1.0: full, the split waits for it)."""
        return [b / w for b, w in zip(self.backlog(), self.windows())]

    def backlog_seconds(self, now: float) -> list[float]:
        """Each replica's work left at ``now``, in seconds of its own measured work: its backlog's (:meth:`fill`
        times its window's seconds), less the time it has worked since its backlog was last known exactly.

        The merge learns of finished tuples only as their outputs come in (a piece's, or a slice's), and a
        remote replica's also wait for the ring and the merge's next turn: the backlog alone read 40-80 ms
        of work too much, now in one replica, now in the other, and the last pieces went to the wrong one.
        """
        return [max(0.0, f * w - (now - at)) for f, w, at in zip(self.fill(), self._window_s, self.known_at)]

    def preference(self) -> list[float]:
        """:meth:`fill`, with a replica in the split's process counted :data:`LOCAL_BIAS` fuller: a stateless
        split sends to the emptiest by this measure, so the other processes' replicas are kept busy first."""
        local = self.local
        return [f + LOCAL_BIAS if r in local else f for r, f in enumerate(self.fill())]


def _bounded(tuples: float) -> int:
    return max(MIN_WINDOW, min(MAX_WINDOW, int(tuples)))
