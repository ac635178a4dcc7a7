"""Ordered split / replica / merge: data parallelism with sequence numbers (C-Stream §4.2).

Role
----
A stateless or partitioned stateful function operator ``X`` whose work is
spread over several replicas (typically in different worker processes) is
rewritten as::

    upstream -> X#split -> X#0 .. X#k-1 -> X#merge -> downstream

* :class:`OrderedSplit` cuts its input into *batches* and gives each batch one
  serial number (``seq``, consecutive from 0). A stateless operator's batches
  go round-robin to the active replicas whole; a partitioned one's tuples go
  by key (``hash(key) % partitions`` → a partition → the replica that owns it),
  so one key always meets the same replica and its state stays whole. A batch
  cut into ``parts`` pieces carries, per piece, the tuples' offsets in the batch.
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

Wire format (plain tuples: they cross shared-memory rings, pickled in batches)
------------------------------------------------------------------------------
* split → replica: ``(seq, parts, offsets, items)`` — ``offsets`` is None when
  ``items`` is the whole batch in order (then ``parts == 1``).
* replica → merge: ``(seq, parts, offsets, outputs, nested)`` — ``outputs`` is
  flat (the batch's outputs in order, or one output per offset when the
  operator is one-to-one) unless ``nested``, when ``outputs[i]`` is the list of
  outputs of the input at ``offsets[i]``.
* replica → merge at end of input: ``(END_SEQ, replica_index, outputs)`` — what
  the replica's ``on_inputs_closed`` returned; the merge emits these after
  every ordered output, replica by replica.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.operators.base import PARTITIONED, STATELESS, FunctionOperator, Operator, Status
from elastream.ordered.reorder import REORDER_SCHEMES, ReorderStats, make_reorder_buffer

#: ``seq`` of the end-of-input message a replica sends the merge.
END_SEQ = -1
#: Most tuples the split puts in one batch (one serial number).
DEFAULT_CHUNK = 256
#: Batches the merge's reorder buffer holds before it parks later ones aside.
DEFAULT_REORDER_CAPACITY = 4096


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

    ``key`` None: round-robin of whole batches over the active replicas
    (stateless operators). With ``key``: tuple ``x`` goes to replica
    ``table[hash(key(x)) % partitions]`` (partitioned operators); ``table``
    defaults to partition ``p`` → replica ``p % replicas``.

    Example::

        split = OrderedSplit(2, key=lambda e: e[0], partitions=8)
    """

    kind = "split"

    def __init__(self, replicas: int, *, key: Callable[[Any], Any] | None = None, partitions: int = 1,
                 table: Sequence[int] | None = None, chunk: int = DEFAULT_CHUNK):
        if replicas < 1:
            raise ValueError(f"an ordered split needs at least one replica, got {replicas}")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        super().__init__(inputs=1, outputs=replicas)
        self.key = key
        self.chunk = chunk
        self.partitions = max(1, int(partitions))
        self.table = list(table) if table is not None else [p % replicas for p in range(self.partitions)]
        if len(self.table) != self.partitions or not all(0 <= r < replicas for r in self.table):
            raise ValueError(f"table must map each of {self.partitions} partitions to a replica in 0..{replicas - 1}")
        self._active = list(range(replicas))
        self._requested: list[int] | None = None
        self._rr = 0
        self.batches = 0

    @property
    def active(self) -> list[int]:
        """Replicas that receive new batches (round-robin mode)."""
        return list(self._active)

    def set_active(self, replicas: Sequence[int]) -> None:
        """Route new batches only to ``replicas`` (output indexes), from the next batch on.

        Round-robin mode only: a replica that leaves finishes what it holds and
        the merge never waits for it; one that joins gets the next batches.
        Moving a partitioned operator's keys would need its state moved too,
        so keyed mode refuses.
        """
        if self.key is not None:
            raise NotImplementedError("moving partitions between replicas needs state migration (not built)")
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
        route = self._route_round_robin if self.key is None else self._route_by_key
        seq = 0
        while await ctx.wait_for_any(spec) is Status.DONE:
            items = port.pop_many(self.chunk)
            for r, piece in route(seq, items):
                await outs[r].push(piece)
            seq += 1
            self.batches = seq

    def _route_round_robin(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        if self._requested is not None:
            self._active, self._requested = self._requested, None
        active = self._active
        r = active[self._rr % len(active)]
        self._rr += 1
        return [(r, (seq, 1, None, items))]

    def _route_by_key(self, seq: int, items: list) -> list[tuple[int, tuple]]:
        key, table, parts = self.key, self.table, self.partitions
        n = self.n_outputs
        if n == 1:
            return [(0, (seq, 1, None, items))]
        pieces: list[list] = [[] for _ in range(n)]
        offsets: list[list[int]] = [[] for _ in range(n)]
        for j, x in enumerate(items):
            r = table[hash(key(x)) % parts]  # type: ignore[misc]
            pieces[r].append(x)
            offsets[r].append(j)
        used = [r for r in range(n) if pieces[r]]
        if len(used) == 1:
            return [(used[0], (seq, 1, None, items))]
        return [(r, (seq, len(used), offsets[r], pieces[r])) for r in used]

    def describe(self) -> str:
        mode = "round-robin" if self.key is None else f"key, {self.partitions} partitions"
        return f"OrderedSplit({self.n_outputs} replicas, {mode})"


class OrderedReplica(Operator):
    """One replica of a stateless or partitioned function operator, behind an :class:`OrderedSplit`.

    Takes one piece at a time (so its quantum is respected even when the
    operator is slow) and returns the outputs tagged with the piece's serial
    number and offsets. Each replica owns its own copy of the operator.
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
            await out.push(self.run_piece(port.pop()))
        if ctx.shutdown_requested:
            return
        final = self.inner.on_inputs_closed()
        if final:
            await out.push((END_SEQ, self.index, list(final)))

    def run_piece(self, piece: tuple) -> tuple:
        """Process one piece from the split; return what the merge expects."""
        seq, parts, offsets, items = piece
        on_batch = self.inner.on_batch
        if offsets is None:
            return seq, parts, None, on_batch(items, 0) or [], False
        if self.one_to_one:
            outputs = on_batch(items, 0)
            if outputs is None or len(outputs) != len(items):
                raise ValueError(f"{type(self.inner).__name__} declares one_to_one but returned "
                                 f"{0 if outputs is None else len(outputs)} outputs for {len(items)} inputs")
            return seq, parts, offsets, outputs, False
        # Per input, so each keeps its own output list (ordered-multicore §3: one serial, many outputs).
        # Operators may offer on_items (one loop for the whole piece); else on_batch per input.
        on_items = getattr(self.inner, "on_items", None)
        per_input = on_items(items, 0) if on_items is not None else [on_batch([x], 0) for x in items]
        return seq, parts, offsets, [out or [] for out in per_input], True

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
    and ring capacities upstream, so parking is bounded too.

    Example::

        merge = OrderedMerge(reorder="nonblocking", capacity=4096)
    """

    kind = "merge"

    def __init__(self, reorder: str = "nonblocking", capacity: int = DEFAULT_REORDER_CAPACITY):
        if reorder not in REORDER_SCHEMES:
            raise ValueError(f"unknown reorder scheme {reorder!r}; choose one of {', '.join(REORDER_SCHEMES)}")
        super().__init__(inputs=1, outputs=1)
        self.reorder = reorder
        self.capacity = int(capacity)
        self._rb: Any = None
        self._out: list = []
        self._partial: dict[int, list[tuple]] = {}
        self._parked: list[tuple[int, list]] = []
        self._max_parked = 0
        self._ends: dict[int, list] = {}

    def open(self, ctx) -> None:
        self._rb = make_reorder_buffer(self.reorder, self.capacity, self._emit)
        self._out, self._partial, self._parked, self._ends = [], {}, [], {}
        self._max_parked = 0

    def _emit(self, outputs: Sequence[Any]) -> None:
        self._out += outputs

    def on_batch(self, items: list, port: int) -> list:
        self._out = out = []
        partial = self._partial
        for msg in items:
            seq = msg[0]
            if seq == END_SEQ:
                self._ends[msg[1]] = msg[2]
                continue
            parts = msg[1]
            if parts == 1:
                self._offer(seq, _flat(msg[3], msg[4]))
                continue
            got = partial.get(seq)
            if got is None:
                partial[seq] = [msg]
            elif len(got) + 1 < parts:
                got.append(msg)
            else:
                del partial[seq]
                got.append(msg)
                self._offer(seq, _assemble(got))
        if self._parked:
            self._unpark()
        return out

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
        for index in sorted(self._ends):
            final += self._ends[index]
        return final or None

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
    for _, _, offsets, outputs, is_nested in pieces:
        nested = nested or is_nested
        for off, o in zip(offsets, outputs):
            slots[off] = o
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
