"""One replica of a stateless or partitioned function operator behind an ordered split (C-Stream §4.2).

:class:`OrderedReplica` runs its own instance of the operator and answers each
piece from the split with the outputs of every input: one input that produces
several outputs, or none, keeps its one place (an empty list still advances
the merge). It decides what it can do from the operator's
:class:`~elastream.operators.spec.OperatorSpec` alone: ``one_to_one`` (a keyed
piece in one ``on_batch``), ``on_end`` / ``ends_by_key`` (end outputs per key),
``movable_state`` (a key group's state leaves with ``export_state`` and
arrives with ``import_state``). Messages are those of :mod:`elastream.ordered.wire`.

Threading: one worker at a time runs a replica (it owns its operator's state).
"""

from __future__ import annotations

import copy
from array import array
from collections import deque
from time import perf_counter

from elastream.operators.base import Driver, Operator, Status
from elastream.operators.spec import PARALLEL_KINDS, Kind, OperatorSpec
from elastream.ordered.early_export import take_back_exports
from elastream.ordered.wire import END_SEQ, EXPORT_SEQ, STATE_SEQ, WHOLE_SEQ

#: Seconds of work a replica does in one go. A keyed one looks for a key group's export request in between:
#: the longest a move waits for the replica (moves hold their group's tuples, and the merge's output,
#: meanwhile). A stateless one gives way in between (:meth:`OrderedReplica.run_piece_giving_way`).
SLICE_S = 0.01
MIN_SLICE = 16
#: Most tuples a replica running its unit whole hands its operator at once (a port's worth, as a task would).
WHOLE_BATCH = 256


def is_one_to_one(op: Operator) -> bool:
    """True when ``op.on_batch`` returns exactly one output per input, in order (its spec says so).

    Then a replica can process a keyed piece in one ``on_batch`` call and the
    merge can place outputs by offset (``Map`` and ``KeyedReduce`` are one-to-one).

    Example: ``is_one_to_one(es.ops.Map(abs))`` is True, ``is_one_to_one(es.ops.Filter(bool))`` False.
    """
    return op.spec().one_to_one


def replicable_kind(op: Operator) -> Kind | None:
    """The kind that makes ``op`` replicable (stateless / partitioned), else None.

    A one-input, one-output operator driven by batches (a function operator) whose kind may run as
    several instances.

    Example: ``replicable_kind(es.ops.Map(abs)) == "stateless"``
    """
    return _replicable_kind(op.spec())


def _replicable_kind(spec: OperatorSpec) -> Kind | None:
    if spec.driver is not Driver.BATCH or spec.inputs != 1 or spec.outputs != 1:
        return None
    return spec.kind if spec.kind in PARALLEL_KINDS else None


class OrderedReplica(Operator):
    """One replica of a stateless or partitioned function operator, behind an ordered split.

    Takes one piece at a time (so its quantum is respected even when the
    operator is slow), gives way after each one that leaves more in hand to
    the operators of its process that wait (the split, the merge, the ring
    proxies: a local replica holding the worker for a whole quantum would
    leave the others without input, or their outputs uncounted; with nothing
    more in hand its wait for input lets them run), and returns the outputs tagged with the piece's serial
    number and offsets. Each replica owns its own instance of the operator; it
    hands over or takes in a key group's state when the split asks.

    Example: ``OrderedReplica(es.ops.Map(abs), 0).run_piece((0, 2, None, [-1, 2]))[3] == [1, 2]``
    """

    def __init__(self, inner: Operator, index: int, origin: str | None = None):
        spec = inner.spec()
        if spec.driver is not Driver.BATCH or spec.inputs != 1 or spec.outputs != 1:
            raise TypeError(f"only one-input, one-output function operators can be replicated, "
                            f"not {type(inner).__name__}")
        super().__init__(inputs=1, outputs=1)
        self.inner = inner
        self.index = index
        self.origin = origin
        """The name of the operator this replicates (what its errors are reported under)."""
        self.kind = spec.kind
        self.one_to_one = spec.one_to_one
        self.ends_by_key = spec.on_end is not None and spec.ends_by_key
        self.movable_state = spec.movable_state
        # A keyed replica answers export requests ahead of its queue (ordered.early_export).
        self._key_groups = (spec.key, spec.key_groups) if spec.movable_state and spec.key is not None else None
        # It also works through a long piece in slices of about SLICE_S, looking for exports in between.
        self._ahead: deque[tuple] = deque()
        # Tuples processed since the start and the seconds they took, for the slices' size. Not the recent
        # cost (ordered.link.RecentCost), by measurement: after IBM Fig. 10's rise from 5 to 40 us slices at
        # the new cost gave way several times more often, and the 40 us phase measured 14.7-15.4k tuples/s against
        # 16.1-16.4k (the cheap phase after it 113-116k against 116-119k; 2 interleaved rounds, 15 s phases).
        self._work = [0, 0.0]
        self.cost_us, self.selectivity = spec.cost_us, spec.selectivity  # declared costs, for offline placement
        self._end_handled = False

    def spec(self) -> OperatorSpec:
        return self.spec_with(reports_as=self.origin)

    def instantiate(self) -> OrderedReplica:
        """The run's replica, over the run's own instance of the operator (the flow's keeps no state)."""
        replica = copy.copy(self)
        replica.inner = self.inner.instantiate()
        replica._ahead, replica._work = deque(), [0, 0.0]
        return replica

    def open(self, ctx) -> None:
        self.inner.open(ctx)

    def close(self) -> None:
        self.inner.close()

    async def process(self, ctx) -> None:
        port, out = ctx.inputs[0], ctx.outputs[0]
        spec = {port: 1}
        early, ahead = self._key_groups is not None, self._ahead
        looked = -1  # what had arrived at the last look for export requests: look again only after more
        while ahead or len(port) or await ctx.wait_for_any(spec) is Status.DONE:
            if early and port.received != looked and len(port) and (ahead or len(port) > 1):
                looked = port.received
                if await self._export_early(ctx, port, out):
                    continue
            if ahead:
                msg = ahead.popleft()
            else:
                msg = port.pop()
                if early and msg[0] >= 0:
                    msg = self._first_slice(msg)
            if msg[0] >= 0:
                await out.push(await self.run_piece_giving_way(ctx, msg))
                if ahead or len(port):
                    # Pieces are long: the split, the merge and the proxies must not wait a quantum. With
                    # nothing more in hand the wait below lets them run anyway: giving way then would cost
                    # this replica one more activation per piece, only to find its input empty.
                    await ctx.give_way()
            elif msg[0] == WHOLE_SEQ:
                await self._run_whole(ctx, port, out)
                return
            elif msg[0] == EXPORT_SEQ:
                await out.push(self.export_partition(msg[1]))
            else:
                self.import_partition(msg[2])
                looked = -1  # an export waiting behind this import may go early now
        if ctx.shutdown_requested or self._end_handled:
            return
        if self.ends_by_key:
            ends = self.inner.end_by_key()  # the merge orders them by the whole stream's first-seen keys
            if ends:
                await out.push((END_SEQ, self.index, ends, True))
            return
        final = self.inner.on_inputs_closed()
        if final:
            await out.push((END_SEQ, self.index, list(final), False))

    async def _run_whole(self, ctx, port, out) -> None:
        """Run as the operator itself from now on: the unit moved into this process whole
        (:mod:`elastream.runtime.bypass`), so its input brings the unit's tuples, not pieces, and what the
        operator returns goes to the unit's consumer as it is, its end-of-input outputs too."""
        on_batch, spec = self.inner.on_batch, {port: 1}
        while len(port) or await ctx.wait_for_any(spec) is Status.DONE:
            outputs = on_batch(port.pop_many(WHOLE_BATCH), 0)
            if outputs:
                await out.push_many(outputs)
        if not ctx.shutdown_requested:
            final = self.inner.on_inputs_closed()
            if final:
                await out.push_many(list(final))

    def bypass_operator(self) -> Operator:
        """The operator instance this replica runs, for a bypass to run until the unit spreads
        (:mod:`elastream.runtime.bypass`): it shares this replica's state."""
        return self.inner

    def first_seen_keys(self) -> list:
        """The keys its operator holds state for, in first-seen order (a split taking over from a bypass)."""
        keys = getattr(self.inner, "first_seen_keys", None)
        return keys() if keys is not None else []

    def end_handled(self) -> None:
        """The bypass ended the stream and gave the end outputs: this replica must not give them again."""
        self._end_handled = True

    def _first_slice(self, piece: tuple) -> tuple:
        """The first SLICE_S of ``piece``'s work (by this replica's measured cost); the rest waits ahead of the
        port, so that a key group's export is answered within a slice, not a whole piece, of its request.
        Only with nothing ahead already: the slices keep the piece's order."""
        seq, size, offsets, items = piece
        step = self._slice_step(len(items))
        if len(items) <= step:
            return piece
        if offsets is None:
            offsets = array("i", range(len(items)))
        for i in range(step, len(items), step):
            self._ahead.append((seq, size, offsets[i:i + step], items[i:i + step]))
        return seq, size, offsets[:step], items[:step]

    async def run_piece_giving_way(self, ctx, piece: tuple) -> tuple:
        """:meth:`run_piece`, giving way to the process's waiting operators after every SLICE_S of the work
        of a whole stateless piece (a keyed piece comes in slices already).

        A stateless split's piece holds several times SLICE_S (PIECE_S per replica), and the light path
        sharing the process — a union, a sink, the ring ends — moves at most a port's worth per turn: with
        whole pieces, C-Stream Fig. 11's six branches at 80 us on two processes reached their sink at
        16-18k tuples/s while they computed 24k/s. The piece still reaches the merge whole: slices sent on
        their own would be placed there by offset, tuple by tuple.
        """
        seq, size, offsets, items = piece
        step = self._slice_step(len(items))
        if offsets is not None or len(items) <= step:
            return self.run_piece(piece)
        outputs: list = []
        nested, took = False, 0.0
        for i in range(0, len(items), step):
            if i:
                await ctx.give_way()
            t0 = perf_counter()
            part, nested = self._outputs(None, items[i:i + step])
            took += perf_counter() - t0
            outputs.extend(part)
        self._work[0] += len(items)
        self._work[1] += took
        return seq, size, offsets, outputs, nested, self.index, len(items), took

    def _slice_step(self, n: int) -> int:
        """Tuples in SLICE_S of this replica's measured work (all ``n`` until it has measured any)."""
        done, seconds = self._work
        return max(MIN_SLICE, int(SLICE_S * done / seconds)) if seconds > 0 else n

    def run_piece(self, piece: tuple) -> tuple:
        """Process one piece from the split; return what the merge expects."""
        seq, size, offsets, items = piece
        t0 = perf_counter()
        outputs, nested = self._outputs(offsets, items)
        took = perf_counter() - t0
        work = self._work
        work[0] += len(items)
        work[1] += took
        return seq, size, offsets, outputs, nested, self.index, len(items), took

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
        per_input = self.inner.on_items(items, 0)
        return [out or [] for out in per_input], True

    async def _export_early(self, ctx, port, out) -> bool:
        """Answer the export requests queued in ``port`` now, handing back the moving key groups' tuples
        queued ahead of them (:mod:`elastream.ordered.early_export`); True when there were any."""
        answered: dict[int, list[tuple]] = {}
        key, groups = self._key_groups  # type: ignore[misc]

        def take_back(pending: list) -> list | None:
            found = take_back_exports(pending, key, groups, self._ahead)
            if found is None:
                return None
            kept_ahead, kept, exported = found
            self._ahead.clear()
            self._ahead.extend(kept_ahead)
            answered.update(exported)
            return kept

        port.rewrite(take_back)
        if not answered:
            return False
        for group, pieces in answered.items():
            await out.push(self.export_partition(group, pieces))
        # The states go on at once (a ring to the merge's process, the merge, the split), not a piece later.
        await ctx.give_way()
        return True

    def export_partition(self, group: int, returned: list[tuple] | None = None) -> tuple:
        """Remove the state of key group ``group`` from this replica's operator.

        Returns the message that carries it to the merge, with the group's pieces this replica hands
        back unprocessed (``returned``, in stream order: the split sends them to the group's next replica).
        """
        moved = self.inner.export_state((group,)) if self.movable_state else {}
        return STATE_SEQ, self.index, group, moved, returned or []

    def import_partition(self, moved: dict) -> None:
        """Take over the per-key state of a key group moved here."""
        if not self.movable_state:
            raise RuntimeError(f"{type(self.inner).__name__} keeps no per-key state a key group could move into")
        self.inner.import_state(moved)

    def describe(self) -> str:
        return f"Replica {self.index} of {self.inner.describe()}"
