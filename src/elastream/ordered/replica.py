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
from time import perf_counter

from elastream.operators.base import Driver, Operator, Status
from elastream.operators.spec import PARALLEL_KINDS, Kind, OperatorSpec
from elastream.ordered.wire import END_SEQ, EXPORT_SEQ, STATE_SEQ


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
        self.cost_us, self.selectivity = spec.cost_us, spec.selectivity  # declared costs, for offline placement
        self._end_handled = False

    def spec(self) -> OperatorSpec:
        return self.spec_with(reports_as=self.origin)

    def instantiate(self) -> OrderedReplica:
        """The run's replica, over the run's own instance of the operator (the flow's keeps no state)."""
        replica = copy.copy(self)
        replica.inner = self.inner.instantiate()
        return replica

    def open(self, ctx) -> None:
        self.inner.open(ctx)

    def close(self) -> None:
        self.inner.close()

    async def process(self, ctx) -> None:
        port, out = ctx.inputs[0], ctx.outputs[0]
        spec = {port: 1}
        while len(port) or await ctx.wait_for_any(spec) is Status.DONE:
            msg = port.pop()
            if msg[0] >= 0:
                await out.push(self.run_piece(msg))
                if len(port):
                    # Pieces are long: the split, the merge and the proxies must not wait a quantum. With
                    # nothing more in hand the wait below lets them run anyway: giving way then would cost
                    # this replica one more activation per piece, only to find its input empty.
                    await ctx.give_way()
            elif msg[0] == EXPORT_SEQ:
                await out.push(self.export_partition(msg[1]))
            else:
                self.import_partition(msg[2])
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
        per_input = self.inner.on_items(items, 0)
        return [out or [] for out in per_input], True

    def export_partition(self, group: int) -> tuple:
        """Remove the state of key group ``group`` from this replica's operator.

        Returns the message that carries it to the merge.
        """
        moved = self.inner.export_state((group,)) if self.movable_state else {}
        return STATE_SEQ, self.index, group, moved

    def import_partition(self, moved: dict) -> None:
        """Take over the per-key state of a key group moved here."""
        if not self.movable_state:
            raise RuntimeError(f"{type(self.inner).__name__} keeps no per-key state a key group could move into")
        self.inner.import_state(moved)

    def describe(self) -> str:
        return f"Replica {self.index} of {self.inner.describe()}"
