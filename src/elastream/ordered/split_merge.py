"""Ordered split / replica / merge: data parallelism with sequence numbers (C-Stream §4.2).

Role
----
A stateless or partitioned stateful function operator ``X`` whose work is
spread over several replicas (typically in different worker processes) is
rewritten as::

    upstream -> X#split -> X#0 .. X#k-1 -> X#merge -> downstream

* :class:`OrderedSplit` cuts its input into *batches* and gives each batch one
  serial number (``seq``, consecutive from 0). A stateless operator's batches
  go whole to one replica each; a partitioned one's tuples go by key
  (``hash(key) % partitions`` → a partition → the replica that owns it), so
  one key always meets the same replica and its state stays whole. A batch
  cut into pieces carries, per piece, the tuples' offsets in the batch and the
  batch's size, so the merge knows the batch is whole when the offsets it got
  add up to the size — however many pieces that took (a partition that moves
  takes its queued tuples out of a piece, which then leaves as two).
* :class:`OrderedReplica` wraps one copy of ``X`` and returns, per piece, the
  outputs of every input — one input that produces several outputs, or none,
  keeps its one place (an empty list still advances the merge).
* :class:`OrderedMerge` has **one** input port that every replica publishes to
  (C-Stream §4.2: "a single downstream input port subscribing to the output
  ports of the replicas"). It reassembles each batch from its pieces and
  releases batches through the reorder buffer of ordered-multicore §3
  (:func:`~elastream.ordered.reorder.make_reorder_buffer`), strictly by
  ``seq``. Order is decided by serial numbers alone, never by replica ids,
  so replicas may join or leave while the flow runs: the merge never waits for
  a particular replica, only for the next serial.

Serial numbers per batch rather than per tuple keep the per-tuple overhead to
a list slot: a stateless batch travels and is released as one unit (no
per-tuple work at all), a partitioned one costs one offset per tuple. Tuple
order is exactly the sequential order because a tuple's position is
``(seq, offset)``.

When the split and the merge share a process they also share a
:class:`~elastream.ordered.rebalance.SplitMergeLink`: the split then bounds
each replica's backlog, sends stateless batches to the least loaded replica
and moves partitions (with their state) away from a replica that lags
(:mod:`elastream.ordered.rebalance`). A keyed split then also keeps one queue
per replica: a batch's pieces wait there while their replica's backlog is
full, so a replica that is slow for a moment (its core shared, its process
busy with other operators, an export waiting behind its backlog) holds back
only its own pieces while the other replicas keep working; the split stops
taking input only when every queue holds ``HOLD`` of its replica's window, or
one holds ``QUEUE_CAP`` windows. Once its input has ended, the split moves
queued partitions towards the replica that would finish first.

Wire format (plain tuples: they cross shared-memory rings, pickled in batches)
------------------------------------------------------------------------------
* split → replica: ``(seq, size, offsets, items)`` — ``size`` is the batch's
  number of tuples; ``offsets`` (an ``array('i')``: one block of bytes on the
  wire, no int object per tuple) holds the tuples' positions in the batch, or
  is None when ``items`` is the whole batch in order; and the
  controls ``(EXPORT_SEQ, partition, keys)`` / ``(IMPORT_SEQ, partition, state)``.
* replica → merge: ``(seq, size, offsets, outputs, nested, replica, inputs,
  busy_s)`` — ``outputs`` is flat (the batch's outputs in order, or one output
  per offset when the operator is one-to-one) unless ``nested``, when
  ``outputs[i]`` is the list of outputs of the input at ``offsets[i]``;
  ``inputs`` and ``busy_s`` feed the link. Also ``(STATE_SEQ, replica,
  partition, state)`` answering an export, and at end of input
  ``(END_SEQ, replica, outputs, by_key)`` — what the replica's ``on_inputs_closed``
  returned, or with ``by_key`` its operator's ``on_end`` outputs as ``(key, outputs)``
  pairs; the merge emits these after every ordered output, replica by replica, or
  by key in the order the split first saw the keys (the link's ``key_order``).

Threading model
---------------
Each of these operators runs in one worker thread at a time (``max_workers``
is 1: the split owns its serial counter, the merge its reorder buffer, a
replica its operator's state). :meth:`OrderedSplit.set_active` may be called
from any thread; the new routing is applied at the next batch boundary.
Port capacities on replicated edges count pieces, not tuples.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from elastream.operators.base import PARTITIONED, STATELESS, FunctionOperator, Kind, Operator, Status
from elastream.ordered.rebalance import (BUSY, HOLD, QUEUE_CAP, RESUME, THROTTLE_S, Move, RateMeter, SplitMergeLink,
                                         choose_moves, keyed_state)
from elastream.ordered.reorder import REORDER_SCHEMES, ReorderStats, make_reorder_buffer

try:
    from elastream.ordered import _splitfast
except ImportError:  # built without a C compiler: cut_by_key_python does the same
    _splitfast = None

#: ``seq`` codes of control messages (data pieces have ``seq >= 0``).
END_SEQ, STATE_SEQ, EXPORT_SEQ, IMPORT_SEQ = -1, -2, -3, -4
#: Most tuples the split puts in one batch (one serial number) while the cost per tuple is unknown.
DEFAULT_CHUNK = 256
#: With a link, batches hold about PIECE_S seconds of work per replica, within these bounds: big enough
#: that per-piece costs vanish, small enough to balance and to keep latency. Each piece costs about nine
#: activations over the two processes of a P=2 run and touches cold caches: 0.04 s pieces took
#: 0.166 s of the processes' own work per ``bench keyed`` run against 0.213 s with 0.02 s pieces.
PIECE_S = 0.04
MIN_CHUNK, MAX_CHUNK = 16, 4096
#: Batches the merge's reorder buffer holds before it parks later ones aside.
DEFAULT_REORDER_CAPACITY = 4096
#: Tuples the merge's downstream port holds (its ``output_capacity``): one arriving piece may release
#: many parked batches at once, and the merge takes no input (so it reports no replica progress to the
#: split) while part of a release still waits for room downstream.
MERGE_OUTPUT_CAPACITY = 1 << 16
#: How often (seconds) a split with a link samples its replicas' throughput, and decides on moves.
CHECK_S = 0.01
DECIDE_S = 0.2
#: Once the input has ended, the split looks for moves every CHECK_S, or END_RECHECK_S after it found none
#: worth making (each look counts the tuples in a queue by partition).
END_RECHECK_S = 0.05


def cut_by_key(items: list, key: Callable[[Any], Any], table: list[int], partitions: int, replicas: int,
               load: list[int] | None = None, seen: dict | None = None,
               keys: list[list] | None = None) -> tuple[list[list], list[list[int]], dict[int, tuple[list, list]]]:
    """Route one batch by key: ``(pieces, offsets, held)``.

    Tuple ``x`` at position ``j`` goes to partition ``p = hash(key(x)) % partitions``
    and to replica ``table[p]`` (``pieces[r]`` gets ``x``, ``offsets[r]`` gets ``j``);
    a partition whose entry is negative is moving, and its tuples go to
    ``held[p] = (offsets, tuples)``. Offsets are ``array('i')``: no int object per
    tuple, and one block of bytes when a piece crosses processes. ``load[p]`` counts partition ``p``'s tuples; a
    key not yet in ``seen`` is added to it and to ``keys[p]``. The loop runs in C
    (:mod:`elastream.ordered._splitfast`) when the extension is built.

    Example: ``cut_by_key([(1, "a"), (2, "b")], lambda x: x[0], [0, 1], 2, 2)``
    → ``([[(2, "b")], [(1, "a")]], [array('i', [1]), array('i', [0])], {})``
    """
    if _splitfast is not None:
        return _splitfast.cut(items, key, table, partitions, replicas, load, seen, keys)
    return cut_by_key_python(items, key, table, partitions, replicas, load, seen, keys)


def cut_by_key_python(items: list, key: Callable[[Any], Any], table: list[int], partitions: int, replicas: int,
                      load: list[int] | None = None, seen: dict | None = None,
                      keys: list[list] | None = None) -> tuple[list[list], list[array], dict[int, tuple[array, list]]]:
    """:func:`cut_by_key` in Python (without the C extension, and the reference it is tested against)."""
    pieces: list[list] = [[] for _ in range(replicas)]
    offsets = [array("i") for _ in range(replicas)]
    held: dict[int, tuple[array, list]] = {}
    for j, x in enumerate(items):
        k = key(x)
        p = hash(k) % partitions
        if seen is not None and k not in seen:
            seen[k] = None
            keys[p].append(k)  # type: ignore[index]
        if load is not None:
            load[p] += 1
        r = table[p]
        if r >= 0:
            pieces[r].append(x)
            offsets[r].append(j)
        else:
            group = held.get(p)
            if group is None:
                group = held[p] = (array("i"), [])
            group[0].append(j)
            group[1].append(x)
    return pieces, offsets, held


def place(slots: list, offsets: Sequence[int], outputs: list) -> None:
    """The merge's reassembly of one piece: ``slots[offsets[i]] = outputs[i]`` for every ``i``.

    In C when the extension is built (``offsets`` an ``array('i')`` or a list of ints).

    Example: ``slots = [None] * 3; place(slots, array("i", [2, 0]), ["c", "a"])`` → ``["a", None, "c"]``
    """
    if _splitfast is not None:
        _splitfast.place(slots, offsets, outputs)
    else:
        place_python(slots, offsets, outputs)


def place_python(slots: list, offsets: Sequence[int], outputs: list) -> None:
    """:func:`place` in Python."""
    if len(offsets) != len(outputs):
        raise ValueError("a piece needs one offset per output")
    for off, o in zip(offsets, outputs):
        slots[off] = o


def is_one_to_one(op: Operator) -> bool:
    """True when ``op.on_batch`` returns exactly one output per input, in order.

    Then a replica can process a keyed piece in one ``on_batch`` call and the
    merge can place outputs by offset. Operators declare it with a
    ``one_to_one = True`` attribute; ``Map`` and ``KeyedReduce`` are one-to-one.

    Example: ``is_one_to_one(es.ops.Map(abs))`` is True, ``is_one_to_one(es.ops.Filter(bool))`` False.
    """
    from elastream.ops.keyed import KeyedReduce
    from elastream.ops.transforms import Map

    return type(op) in (Map, KeyedReduce) or getattr(op, "one_to_one", False) is True


class OrderedSplit(Operator):
    """Assign batch serial numbers and route batches (or keyed pieces) to replicas.

    ``key`` None: whole batches to the active replicas — round-robin, or the
    least loaded one when a ``link`` to the merge is given (stateless
    operators). With ``key``: tuple ``x`` goes to replica
    ``table[hash(key(x)) % partitions]`` (partitioned operators); ``table``
    defaults to partition ``p`` → replica ``p % replicas``, and with a
    ``link`` (and ``moves=True``) partitions move towards replicas that run dry.
    With a link, a keyed split records the keys in first-seen order in
    ``link.key_order`` whenever it moves partitions or ``track_keys`` asks (an
    operator with ``on_end``: the merge orders the replicas' ends by it).

    Example::

        split = OrderedSplit(2, key=lambda e: e[0], partitions=8)
    """

    kind = Kind.COROUTINE

    def __init__(self, replicas: int, *, key: Callable[[Any], Any] | None = None, partitions: int = 1,
                 table: Sequence[int] | None = None, chunk: int | None = None,
                 link: SplitMergeLink | None = None, moves: bool = True, track_keys: bool = False):
        if replicas < 1:
            raise ValueError(f"an ordered split needs at least one replica, got {replicas}")
        if chunk is not None and chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        super().__init__(inputs=1, outputs=replicas)
        self.key = key
        self.chunk = chunk
        self.partitions = max(1, int(partitions))
        self.table = list(table) if table is not None else [p % replicas for p in range(self.partitions)]
        if len(self.table) != self.partitions or not all(0 <= r < replicas for r in self.table):
            raise ValueError(f"table must map each of {self.partitions} partitions to a replica in 0..{replicas - 1}")
        self.link = link
        # Tuples the input port holds at least: two batches, so a batch sized by the measured cost is not
        # cut short by the runner's max_queue_size (nor the split's pace tied to one upstream activation).
        self.input_capacity = 2 * (chunk if chunk is not None else MAX_CHUNK if link is not None else DEFAULT_CHUNK)
        self.moves_enabled = bool(moves and link is not None and key is not None and replicas > 1)
        self.track_keys = bool(self.moves_enabled or (track_keys and link is not None and key is not None))
        self._active = list(range(replicas))
        self._requested: list[int] | None = None
        self._rr = 0
        self.batches = 0
        self.moves_done = 0
        self._moves: dict[int, Move] = {}
        self._load = [0] * self.partitions
        self._keys: list[list] = [[] for _ in range(self.partitions)]
        self._seen: dict = link.key_order if link is not None else {}  # the keys, in first-seen order
        self._meter = RateMeter(replicas)
        # A keyed split with a link queues each replica's pieces and sends them while its backlog has room.
        keyed_link = link is not None and key is not None and replicas > 1
        self._queues: list[deque] | None = [deque() for _ in range(replicas)] if keyed_link else None
        self._queued = [0] * replicas
        self._direction: tuple[int, int] | None = None
        self._next_check = 0.0
        self._next_decision = 0.0

    @property
    def active(self) -> list[int]:
        """Replicas that receive new batches (stateless mode)."""
        return list(self._active)

    def set_active(self, replicas: Sequence[int]) -> None:
        """Route new batches only to ``replicas`` (output indexes), from the next batch on.

        Stateless mode only: a replica that leaves finishes what it holds and
        the merge never waits for it; one that joins gets the next batches.
        Moving a partitioned operator's keys needs their state moved too,
        which the split does on its own when it has a link; keyed mode refuses.
        """
        if self.key is not None:
            raise NotImplementedError("a keyed split places partitions itself (moves carry their state)")
        chosen = sorted(set(int(r) for r in replicas))
        if not chosen or not all(0 <= r < self.n_outputs for r in chosen):
            raise ValueError(f"active replicas must be a non-empty subset of 0..{self.n_outputs - 1}, got {replicas}")
        self._requested = chosen  # one reference store: applied by the split between batches

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
            if self.link is not None:
                await self._settle(ctx)
            items = port.pop_many(self._batch_size())
            for r, piece in route(seq, items):
                if queued:
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

    def _batch_size(self) -> int:
        """``chunk`` when given; else, with a link, about PIECE_S of work per replica piece (scaled as the
        link's windows are)."""
        if self.chunk is not None:
            return self.chunk
        cost = self.link.cost_per_tuple() if self.link is not None else None
        if not cost:
            return DEFAULT_CHUNK
        return max(MIN_CHUNK, min(MAX_CHUNK, int(PIECE_S * self.link.scale * self.n_outputs / cost)))  # type: ignore[union-attr]

    async def _send(self, outs: list, r: int, piece: tuple) -> None:
        if self.link is not None:
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
        return min(fill) >= limit or max(fill) >= limit * QUEUE_CAP / HOLD

    async def _balance(self, outs: list) -> None:
        """Sample the replicas' progress every CHECK_S; every DECIDE_S, start the moves their rates call for.

        No decision while a move is still on its way (its tuples are held), nor
        on an imbalance seen only once (one period's rates may be a burst).
        """
        now = perf_counter()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_S
        link = self.link
        if not all(link.done):  # type: ignore[union-attr]
            # A replica still starting (its process booting) has no rate yet: judge only once all run.
            self._next_decision = now + DECIDE_S
            return
        windows = link.windows()  # type: ignore[union-attr]
        in_hand = [b >= BUSY * w for b, w in zip(link.backlog(), windows)]  # type: ignore[union-attr]
        self._meter.observe(now, link.done, in_hand, link.busy_s)  # type: ignore[union-attr]
        if now < self._next_decision or self._moves:
            return
        self._next_decision = now + DECIDE_S
        moves = choose_moves(self._meter.update(), self.table, self._load)
        self._load = [n // 2 for n in self._load]  # recent load: older tuples count less at every decision
        direction = (moves[0][1], moves[0][2]) if moves else None
        moves, self._direction = (moves if direction is not None and direction == self._direction else []), direction
        if moves:
            self._start_moves(moves)
            await self._flush(outs)

    def _balance_end(self) -> None:
        """Once the input has ended: move queued partitions from the replica that would finish last to the
        one that would finish first, while that brings the end of the run closer.

        Each replica's finish is its backlog and queue at its measured rate. A moved partition's tuples
        reach the target only after the source has done what it was sent (the export waits for it), so
        a move counts from then on; each partition moves only if the later of the two finishes gets earlier.
        """
        now = perf_counter()
        measured = self._meter.rates
        if now < self._next_check or any(r is None or r <= 0 for r in measured):
            return
        self._next_check = now + CHECK_S
        rates = [float(r) for r in measured]  # type: ignore[arg-type]
        backlog = self.link.backlog()  # type: ignore[union-attr]
        finish = [(b + q) / r for b, q, r in zip(backlog, self._queued, rates)]
        source = max(range(len(finish)), key=finish.__getitem__)
        target = min(range(len(finish)), key=finish.__getitem__)
        if finish[source] - finish[target] < CHECK_S or not self._queued[source]:
            return
        queued = self._queued_by_partition(source)
        rs, rt = rates[source], rates[target]
        fs, ft = finish[source], max(finish[target], backlog[source] / rs)
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
        any import still queued there: a partition that arrived and leaves again must arrive first.
        The tuples taken out go first into each move's ``held`` pieces, in order, with their batch's
        serial number, size and offsets: the merge completes a batch from any number of pieces.
        """
        table = [-1 if p in moving else 0 for p in range(self.partitions)]
        queue: deque = deque()
        controls = 0  # the exports go after the last control message
        for msg, tuples in self._queues[source]:  # type: ignore[index]
            if msg[0] < 0:
                queue.append((msg, tuples))
                controls = len(queue)
                continue
            seq, size, offsets, items = msg
            kept, local, taken = cut_by_key(items, self.key, table, self.partitions, 1)  # type: ignore[arg-type]
            if not taken:
                queue.append((msg, tuples))
                continue
            for p, (offs, xs) in taken.items():
                moving[p].held.append((seq, size, _in_batch(offsets, offs), xs))
            if kept[0]:
                queue.append(((seq, size, _in_batch(offsets, local[0]), kept[0]), len(kept[0])))
            self._queued[source] -= tuples - len(kept[0])
        exports = [((EXPORT_SEQ, p, list(self._keys[p])), 0) for p in moving]
        for i, export in enumerate(exports):
            queue.insert(controls + i, export)
        self._queues[source] = queue  # type: ignore[index]

    async def _deliver_states(self, outs: list) -> None:
        states = self.link.states  # type: ignore[union-attr]
        for p in [p for p in self._moves if p in states]:
            move = self._moves.pop(p)
            self._enqueue(move.target, (IMPORT_SEQ, p, states.pop(p)), 0)
            for piece in move.held:
                self._enqueue(move.target, piece, len(piece[3]))
            self.table[p] = move.target
            self.moves_done += 1
            if not self._moves:  # the load shares the moves set up show from the next period on
                self._next_decision = perf_counter() + DECIDE_S

    def _route_stateless(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        if self._requested is not None:
            self._active, self._requested = self._requested, None
        active = self._active
        if self.link is not None:  # join the shortest queue, measured in each replica's own time
            fill = self.link.fill()
            r = min(active, key=fill.__getitem__)
        else:
            r = active[self._rr % len(active)]
            self._rr += 1
        return [(r, (seq, len(items), None, items))]

    def _route_by_key(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        """Cut a batch by key into one piece per replica; with ``track_keys`` also record each partition's
        keys and load, and hold the tuples of moving partitions."""
        n, size = self.n_outputs, len(items)
        tracked = self.track_keys
        if n == 1 and not tracked:
            return [(0, (seq, size, None, items))]
        pieces, offsets, held = cut_by_key(items, self.key, self.table, self.partitions, n,  # type: ignore[arg-type]
                                           *((self._load, self._seen, self._keys) if tracked else ()))
        used = [r for r in range(n) if pieces[r]]
        for p, (offs, xs) in held.items():
            self._moves[p].held.append((seq, size, offs, xs))
        if len(used) == 1 and not held:
            return [(used[0], (seq, size, None, items))]
        return [(r, (seq, size, offsets[r], pieces[r])) for r in used]

    def describe(self) -> str:
        mode = "stateless" if self.key is None else f"key, {self.partitions} partitions"
        return f"OrderedSplit({self.n_outputs} replicas, {mode})"


class OrderedReplica(Operator):
    """One replica of a stateless or partitioned function operator, behind an :class:`OrderedSplit`.

    Takes one piece at a time (so its quantum is respected even when the
    operator is slow), gives way after each one to the operators of its
    process that wait (the split, the merge, the ring proxies: a local
    replica holding the worker for a whole quantum would leave the others
    without input, or their outputs uncounted), and returns the outputs tagged with the piece's serial
    number and offsets. Each replica owns its own copy of the operator; it
    hands over or takes in a partition's per-key state when the split asks.
    """

    def __init__(self, inner: FunctionOperator, index: int):
        if not isinstance(inner, FunctionOperator) or inner.n_inputs != 1 or inner.n_outputs != 1:
            raise TypeError(f"only one-input, one-output function operators can be replicated, "
                            f"not {type(inner).__name__}")
        super().__init__(inputs=1, outputs=1)
        self.inner = inner
        self.index = index
        self.kind = inner.kind
        self.one_to_one = is_one_to_one(inner)
        for attribute in ("cost_us", "selectivity"):  # declared costs, for offline placement
            if hasattr(inner, attribute):
                setattr(self, attribute, getattr(inner, attribute))

    def open(self, ctx) -> None:
        self.inner.open(ctx)

    def close(self) -> None:
        self.inner.close()

    async def process(self, ctx) -> None:
        port, out = ctx.inputs[0], ctx.outputs[0]
        spec = {port: 1}
        while await ctx.wait_for_any(spec) is Status.DONE:
            msg = port.pop()
            if msg[0] >= 0:
                await out.push(self.run_piece(msg))
                await ctx.give_way()  # pieces are long: the split, the merge and the proxies must not wait a quantum
            elif msg[0] == EXPORT_SEQ:
                await out.push(self.export_partition(msg[1], msg[2]))
            else:
                self.import_partition(msg[2])
        if ctx.shutdown_requested:
            return
        if getattr(self.inner, "on_end", None) is not None and hasattr(self.inner, "end_by_key"):
            ends = self.inner.end_by_key()  # the merge orders them by the whole stream's first-seen keys
            if ends:
                await out.push((END_SEQ, self.index, ends, True))
            return
        final = self.inner.on_inputs_closed()
        if final:
            await out.push((END_SEQ, self.index, list(final), False))

    def run_piece(self, piece: tuple) -> tuple:
        """Process one piece from the split; return what the merge expects."""
        seq, size, offsets, items = piece
        t0 = perf_counter()
        outputs, nested = self._outputs(offsets, items)
        return seq, size, offsets, outputs, nested, self.index, len(items), perf_counter() - t0

    def _outputs(self, offsets: list[int] | None, items: list) -> tuple[list, bool]:
        on_batch = self.inner.on_batch
        if offsets is None:
            return on_batch(items, 0) or [], False
        if self.one_to_one:
            outputs = on_batch(items, 0)
            if outputs is None or len(outputs) != len(items):
                raise ValueError(f"{type(self.inner).__name__} declares one_to_one but returned "
                                 f"{0 if outputs is None else len(outputs)} outputs for {len(items)} inputs")
            return outputs, False
        # Per input, so each keeps its own output list (ordered-multicore §3: one serial, many outputs).
        # Operators may offer on_items (one loop for the whole piece); else on_batch per input.
        on_items = getattr(self.inner, "on_items", None)
        per_input = on_items(items, 0) if on_items is not None else [on_batch([x], 0) for x in items]
        return [out or [] for out in per_input], True

    def export_partition(self, partition: int, keys: list) -> tuple:
        """Remove ``keys``' state from this replica's operator; the message carrying it to the merge."""
        state = keyed_state(self.inner)
        moved = {k: state.pop(k) for k in keys if k in state} if state is not None else {}
        return STATE_SEQ, self.index, partition, moved

    def import_partition(self, moved: dict) -> None:
        """Take over the per-key state of a partition moved here."""
        state = keyed_state(self.inner)
        if state is None:
            raise RuntimeError(f"{type(self.inner).__name__} keeps no per-key state a partition could move into")
        state.update(moved)

    def describe(self) -> str:
        return f"Replica {self.index} of {self.inner.describe()}"


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
    ``link`` is shared), so parking is bounded too.

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
                r = msg[5]
                link.done[r] += msg[6]
                link.busy_s[r] += msg[7]
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


def _in_batch(offsets: array | None, local: array) -> array:
    """Offsets in the batch of a piece's tuples at positions ``local`` in the piece (``offsets`` None: the
    piece is the whole batch)."""
    return local if offsets is None else array("i", [offsets[j] for j in local])


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


def replicable_kind(op: Operator) -> str | None:
    """The kind that makes ``op`` replicable ("stateless" / "partitioned"), else None."""
    if not isinstance(op, FunctionOperator) or op.n_inputs != 1 or op.n_outputs != 1:
        return None
    return op.kind if op.kind in (STATELESS, PARTITIONED) else None
