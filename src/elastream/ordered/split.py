"""The ordered split in front of an operator's replicas: serial numbers and routing (C-Stream §4.2).

:class:`OrderedSplit` cuts its input into *batches* and gives each batch one
serial number (``seq``, consecutive from 0). A stateless operator's batches go
whole to one replica each; a partitioned one's tuples go by key: to the key
group ``stable_hash(key) % groups`` (the operator's key groups, the unit whose
state moves) → the replica that owns it (:func:`~elastream.ordered.routing.cut_by_key`),
so one key always meets the same replica and its state stays whole. A batch
cut into pieces carries, per piece, the tuples' offsets in the batch and the
batch's size (:mod:`elastream.ordered.wire`).

With a :class:`~elastream.ordered.link.SplitMergeLink` to its merge the
split bounds each replica's backlog, sends stateless batches to the least
loaded replica and moves key groups, with their state, away from a replica
that lags (:class:`~elastream.ordered.rebalance.SplitBalancing`). A keyed split
then keeps one queue per replica: a batch's pieces wait there while their
replica's backlog is full, so a replica that is slow for a moment holds back
only its own pieces; the split stops taking input only when every queue holds
``HOLD`` of its replica's window, or one holds ``QUEUE_CAP`` windows.

Under a light load (a unit held ready: one active replica, a tuple or a few
per batch) a batch costs the split little more than a routing: while nothing
is queued, moving or due to be sampled and a replica's backlog is below the
smallest window, the split neither computes windows nor settles, and sends
each piece at once — what the full path would do then, computed more cheaply.

Threading: one worker at a time runs the split (it owns its serial counter,
table and queues); :meth:`OrderedSplit.set_active` may be called from any
thread, and the new routing is applied at the next batch boundary.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from elastream.operators.base import Kind, Operator, Status
from elastream.ordered.link import MIN_WINDOW, SplitMergeLink
from elastream.ordered.rebalance import HOLD, QUEUE_CAP, RESUME, THROTTLE_S, Move, RateMeter, SplitBalancing
from elastream.ordered.routing import cut_by_key

#: Most tuples the split puts in one batch (one serial number) when it has no link to measure the cost by.
DEFAULT_CHUNK = 256
#: With a link, batches hold about PIECE_S seconds of work per replica, within these bounds: big enough
#: that per-piece costs vanish, small enough to balance and to keep latency. Each piece costs about nine
#: activations over the two processes of a P=2 run and touches cold caches: 0.04 s pieces took
#: 0.166 s of the processes' own work per ``bench keyed`` run against 0.213 s with 0.02 s pieces.
PIECE_S = 0.04
MIN_CHUNK, MAX_CHUNK = 16, 4096
#: Smallest piece once the input has ended (:meth:`OrderedSplit._batch_size`): the last pieces decide how far
#: apart the replicas run dry, and a few more of them cost less than a replica idle for a 16-tuple piece
#: (the 12 x 100 us chain on two processes, 3,000 tuples: 0.949 of the 2-core ideal against 0.942 with
#: MIN_CHUNK, 18 interleaved runs each).
END_CHUNK = 4


class OrderedSplit(SplitBalancing, Operator):
    """Assign batch serial numbers and route batches (or keyed pieces) to replicas.

    ``key`` None: whole batches to the active replicas — round-robin, or the
    least loaded one when a ``link`` to the merge is given (stateless
    operators). With ``key``: tuple ``x`` goes to replica
    ``table[stable_hash(key(x)) % partitions]`` (partitioned operators: ``partitions`` are the
    operator's key groups); ``table`` defaults to partition ``p`` → replica ``p % replicas``, and with a
    ``link`` (and ``moves=True``) partitions move towards replicas that run dry.
    With a link, a keyed split records the keys in first-seen order in
    ``link.key_order`` whenever it moves partitions or ``track_keys`` asks (an
    operator with ``on_end``: the merge orders the replicas' ends by it).

    Example::

        split = OrderedSplit(2, key=lambda e: e[0], partitions=128)
    """

    kind = Kind.COROUTINE

    def __init__(self, replicas: int, *, key: Callable[[Any], Any] | None = None, partitions: int = 1,
                 table: Sequence[int] | None = None, chunk: int | None = None,
                 link: SplitMergeLink | None = None, moves: bool = True, track_keys: bool = False,
                 active: Sequence[int] | None = None):
        if replicas < 1:
            raise ValueError(f"an ordered split needs at least one replica, got {replicas}")
        if chunk is not None and chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        super().__init__(inputs=1, outputs=replicas)
        self.key = key
        self.chunk = chunk
        self.partitions = max(1, int(partitions))
        self._active = _checked_active(active, replicas)
        self.table = list(table) if table is not None else [self._active[p % len(self._active)]
                                                              for p in range(self.partitions)]
        if len(self.table) != self.partitions or not all(0 <= r < replicas for r in self.table):
            raise ValueError(f"table must map each of {self.partitions} partitions to a replica in 0..{replicas - 1}")
        self.link = link
        # Tuples the input port holds at least: two batches, so a batch sized by the measured cost is not
        # cut short by the runner's max_queue_size (nor the split's pace tied to one upstream activation).
        self.input_capacity = 2 * (chunk if chunk is not None else MAX_CHUNK if link is not None else DEFAULT_CHUNK)
        self.moves_enabled = bool(moves and link is not None and key is not None and replicas > 1)
        self.track_keys = bool(self.moves_enabled or (track_keys and link is not None and key is not None))
        self._requested: list[int] | None = None
        self._reset_routing()

    def _reset_routing(self) -> None:
        """Fresh run state: counters, moves, per-partition load, rates and queues (the table is the caller's)."""
        replicas, link = self.n_outputs, self.link
        self._rr = 0
        #: The split's input is closed: what is left of the stream is in its port (:meth:`_batch_size`).
        self._ending = False
        self.batches = 0
        self.moves_done = 0
        self.longest_hold_s = 0.0
        """Longest time a moving key group's tuples were held until its state arrived (the moves' pause)."""
        self._moves: dict[int, Move] = {}
        self._load = [0] * self.partitions
        self._seen: dict = link.key_order if link is not None else {}  # the keys, in first-seen order
        self._meter = RateMeter(replicas)
        # A keyed split with a link queues each replica's pieces and sends them while its backlog has room.
        keyed_link = link is not None and self.key is not None and replicas > 1
        self._queues: list[deque] | None = [deque() for _ in range(replicas)] if keyed_link else None
        self._queued = [0] * replicas
        self._direction: tuple[int, int] | None = None
        self._next_check = 0.0
        self._next_decision = 0.0

    def instantiate(self) -> OrderedSplit:
        """The run's split: its own table, queues and counters (it shares the flow's link with its merge)."""
        split = copy.copy(self)
        split.table = list(self.table)
        split._active = list(self._active)
        split._reset_routing()
        return split

    @property
    def active(self) -> list[int]:
        """Replicas that receive new batches (stateless mode)."""
        return list(self._active)

    def set_active(self, replicas: Sequence[int]) -> None:
        """Route new batches only to ``replicas`` (output indexes), from the next batch on.

        Stateless: a replica that leaves finishes what it holds and the merge
        never waits for it; one that joins gets the next batches. Partitioned
        (a split with a link, whose moves carry the keys' state): a replica
        that leaves hands all its key groups to the others, one that joins
        gets its share of them at once, and the measured rates balance the
        rest (:meth:`~elastream.ordered.rebalance.SplitBalancing._apply_active`).
        A keyed split without a link cannot move state and refuses.
        """
        if self.key is not None and not self.moves_enabled:
            raise NotImplementedError("a keyed split without a link to its merge cannot move key groups' state")
        self._requested = _checked_active(replicas, self.n_outputs)  # one reference store, applied between batches

    def open(self, ctx) -> None:
        self.batches = 0

    async def process(self, ctx) -> None:
        port = ctx.inputs[0]
        outs = ctx.outputs
        spec = {port: 1}
        route = self._route_stateless if self.key is None else self._route_by_key
        queued = self._queues is not None
        seq = 0
        while await ctx.wait_for_any(spec) is Status.DONE:
            if self.link is not None and not self._calm():
                await self._settle(ctx)
            available = len(port)
            self._ending = port.closed
            # Fewer tuples than the smallest batch in hand (a light load): take them all, sizing costs nothing.
            light = available <= MIN_CHUNK and not self._ending
            items = port.pop_many(self.chunk or (available if light else self._batch_size(available)))
            for r, piece in route(seq, items):
                if queued and not self._sendable(r):
                    self._enqueue(r, piece, len(piece[3]))
                else:
                    await self._send(outs, r, piece)
            if queued:
                await self._flush(outs)
            seq += 1
            self.batches = seq
        # Deliver the partitions still on their way and what waits in the queues, evening out the end.
        while (self._moves or self.queued()) and not ctx.shutdown_requested:
            await self._deliver_states(outs)
            if self.moves_enabled and not self._moves:
                self._balance_end()
            await self._flush(outs)
            if self._moves or self.queued():
                await ctx.sleep(THROTTLE_S)

    def took_over(self, replica: Operator) -> None:
        """Carry on from a bypass that ran ``replica``'s operator (:mod:`elastream.runtime.bypass`): the keys it
        saw come first in the first-seen order the merge gives end outputs in."""
        if self.track_keys:
            for key in replica.first_seen_keys():  # type: ignore[attr-defined]
                self._seen.setdefault(key, None)

    def _batch_size(self, available: int) -> int:
        """``chunk`` when given; else, with a link, about PIECE_S of work per replica piece (scaled as the
        link's windows are); once the input has ended, at most a share of what is left (stateless)."""
        if self.chunk is not None:
            return self.chunk
        if self.link is None:
            return DEFAULT_CHUNK
        cost = self.link.cost_per_tuple()
        if not cost:
            # Until a piece comes back the cost is unknown: small pieces then, since a slow operator's
            # 256-tuple pieces would take seconds each and leave one replica working alone at the end.
            return MIN_CHUNK
        # A stateless batch goes whole to one replica, so it holds n x PIECE_S: halving it measured slower
        # (the 12 x 100 us chain on two processes: 2.06-2.08 s against 2.00-2.03 s, 4 interleaved rounds).
        size = max(MIN_CHUNK, min(MAX_CHUNK, int(PIECE_S * self.link.scale * self.n_outputs / cost)))
        if self._ending and self.key is None:
            # The rest of the stream is in hand: pieces shrink with it (factoring: half of an even share per
            # replica), so the last ones are small and the replicas run dry together.
            size = min(size, max(END_CHUNK, -(-available // (2 * len(self._active)))))
        return size

    def _calm(self) -> bool:
        """True when :meth:`_settle` would neither send, move nor wait now (the cheap test of a light load).

        Keyed: no move on its way, no change of the active replicas asked, nothing queued and no
        sample of the replicas' rates due. Stateless: an active replica has a backlog below the
        smallest window, so the split would not wait (a stateless split has no moves nor queues).
        """
        link = self.link
        if self._queues is not None:
            return (not self._moves and self._requested is None and not any(self._queues)
                    and (not self.moves_enabled or perf_counter() < self._next_check))
        sent, done = link.sent, link.done  # type: ignore[union-attr]
        for r in self._active:
            if sent[r] - done[r] < MIN_WINDOW:
                return True
        return False

    def _sendable(self, r: int) -> bool:
        """True when a keyed split's piece for replica ``r`` may go at once, as :meth:`_flush` would send
        it: nothing queued ahead of it and a backlog below the smallest window (so below ``r``'s own)."""
        link = self.link
        return not self._queues[r] and link.sent[r] - link.done[r] < MIN_WINDOW  # type: ignore[index,union-attr]

    async def _send(self, outs: list, r: int, piece: tuple) -> None:
        if self.link is not None:
            if self.link.sent[r] == self.link.done[r]:
                self.link.known_at[r] = perf_counter()  # it starts on this piece now, not at its last outputs
            self.link.sent[r] += len(piece[3])
        await outs[r].push(piece)

    def queued(self) -> int:
        """Tuples routed to a replica but still held in the split's queues (keyed split with a link)."""
        return sum(self._queued) if self._queues is not None else 0

    def _enqueue(self, r: int, msg: tuple, tuples: int) -> None:
        self._queues[r].append((msg, tuples))  # type: ignore[index]
        self._queued[r] += tuples

    async def _flush(self, outs: list) -> None:
        """Send each replica's queued messages, in order, while its backlog is below its window.

        A keyed batch is cut into one piece per replica; with a queue per
        replica, a replica whose backlog is full (slow, or busy with a move's
        export) holds only its own pieces back, and the others keep working.
        """
        if not any(self._queues):  # type: ignore[arg-type]
            return
        link = self.link
        backlog, windows = link.backlog(), link.windows()  # type: ignore[union-attr]
        for r, queue in enumerate(self._queues):  # type: ignore[arg-type]
            room = windows[r] - backlog[r]
            while queue and (room > 0 or queue[0][1] == 0):
                msg, tuples = queue.popleft()
                self._queued[r] -= tuples
                room -= tuples
                link.sent[r] += tuples  # type: ignore[union-attr]
                await outs[r].push(msg)

    async def _settle(self, ctx) -> None:
        """With a link: deliver returned states, consider a move, and wait while the split must hold back.

        Keyed: flush the per-replica queues and wait while every one of them
        holds HOLD of its replica's window, or one holds QUEUE_CAP windows.
        Stateless: wait while every active replica's backlog is full.
        """
        link = self.link
        outs = ctx.outputs
        limit = 1.0
        while not ctx.shutdown_requested:
            await self._deliver_states(outs)
            if self.moves_enabled:
                await self._balance(outs)
            if self._queues is not None:
                await self._flush(outs)
                fill = [q / (HOLD * w) for q, w in zip(self._queued, link.windows())]
            else:
                fill = link.fill()
            if not self._must_wait(fill, limit):
                return
            # Once full, wait until down to RESUME: then a wake-up sends many batches, not one
            # (each activation of the split costs scheduler work on this process's worker).
            limit = RESUME
            await ctx.sleep(THROTTLE_S)  # a timer, not a poll: the worker runs other operators meanwhile

    def _must_wait(self, fill: list[float], limit: float) -> bool:
        """A keyed split waits while every replica's queue is at ``limit`` (a fraction of HOLD of its
        window), or one is at ``limit`` of QUEUE_CAP windows; a stateless one while every active replica's
        backlog is at ``limit`` (it can send the batch to any of them)."""
        if self.key is None:
            return min(fill[r] for r in self._active) >= limit
        return min(fill[r] for r in self._active) >= limit or max(fill) >= limit * QUEUE_CAP / HOLD

    def _route_stateless(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        if self._requested is not None:
            self._active, self._requested = self._requested, None
        active = self._active
        if len(active) == 1:
            r = active[0]
        elif self.link is not None:  # join the shortest queue, measured in each replica's own time
            # Once the input has ended no operator upstream waits for this process's threads: a local
            # replica is fed as readily as the others, by the seconds of work each has left, so that all of
            # them run dry together (12 x 100 us chain, 3,000 tuples on two processes: the two ended 30 ms
            # apart in the median of 10 runs by the fill of their windows, 10 ms apart by seconds left).
            fill = self.link.backlog_seconds(perf_counter()) if self._ending else self.link.preference()
            r = min(active, key=fill.__getitem__)
        else:
            r = active[self._rr % len(active)]
            self._rr += 1
        return [(r, (seq, len(items), None, items))]

    def _route_by_key(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        """Cut a batch by key into one piece per replica; with ``track_keys`` also record the keys'
        first-seen order and each partition's load, and hold the tuples of moving partitions."""
        n, size = self.n_outputs, len(items)
        tracked = self.track_keys
        if n == 1 and not tracked:
            return [(0, (seq, size, None, items))]
        pieces, offsets, held = cut_by_key(items, self.key, self.table, self.partitions, n,  # type: ignore[arg-type]
                                           *((self._load, self._seen, None) if tracked else ()))
        used = [r for r in range(n) if pieces[r]]
        for p, (offs, xs) in held.items():
            self._moves[p].held.append((seq, size, offs, xs))
        if len(used) == 1 and not held:
            return [(used[0], (seq, size, None, items))]
        return [(r, (seq, size, offsets[r], pieces[r])) for r in used]

    def key_group_load(self) -> tuple[int, ...]:
        """Recent tuples routed per key group (keyed splits; the balancing halves it at each decision)."""
        return tuple(self._load) if self.key is not None else ()

    def describe(self) -> str:
        mode = "stateless" if self.key is None else f"key, {self.partitions} partitions"
        return f"OrderedSplit({self.n_outputs} replicas, {mode})"


def _checked_active(replicas: Sequence[int] | None, n: int) -> list[int]:
    """``replicas`` as a sorted list of distinct output indexes (every output when None)."""
    if replicas is None:
        return list(range(n))
    chosen = sorted(set(int(r) for r in replicas))
    if not chosen or not all(0 <= r < n for r in chosen):
        raise ValueError(f"active replicas must be a non-empty subset of 0..{n - 1}, got {list(replicas)}")
    return chosen
