"""The manual model's source joined to the chain it feeds: one task, no buffer between them (IBM Streams §2.2).

Role: a compile pass of the manual model (``compile_flow(wide=True)``). There one thread runs the
whole flow, fused wide (:mod:`elastream.runtime.fusion`), yet a source is a task of its own and
would hand every batch to its chain through a :class:`~elastream.runtime.buffer.PortBuffer`.
:func:`find_source_joins` finds each pulled source whose only output is the only input of a
fusable operator (a chain's head, or one operator alone); :func:`~elastream.runtime.compile.compile_flow`
then runs the two as one :class:`SourceChainTask` over a :class:`SourcedChain`, which pulls a batch
and calls the chain on it directly.

What stays as it was:

* statistics per operator: the source is a member of its own (tuples out, the seconds its pulls
  took), the chain's members count as in any fused chain; the snapshot lists each
  (:func:`elastream.runtime.snapshot.member_stats`);
* errors name the source or the chain's member that raised (:attr:`SourcedChain.failed_member`);
* back-pressure: what the chain emits goes to the buffers after it through
  :meth:`~elastream.runtime.task.Task.emit`; a full one parks the task WRITE_BLOCKED, so the
  source pulls no more until there is room;
* end of stream: once the source is exhausted the chain's members end in order
  (``on_inputs_closed``); a shutdown cuts the stream short without them, as for any task;
* ``close`` closes the source, then every member (sinks flush there).

Threading: one worker runs the task at a time (the manual model has one). The counters are
plain attributes written by that worker and read without a lock by snapshots, as a task's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elastream.operators.base import Operator, SourceOperator
from elastream.operators.spec import Driver, Kind, OperatorSpec
from elastream.runtime.context import Context
from elastream.runtime.fusion import FusedChain, MemberRunner, _MemberView, fusable
from elastream.runtime.task import Task
from elastream.runtime.traps import COMPLETED, PREEMPT, Outcome, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow


def joinable_source(op: Operator, spec: OperatorSpec) -> bool:
    """May this source call the chain it feeds directly? A pulled source with one output and no side outputs."""
    return spec.driver is Driver.PULL and spec.inputs == 0 and spec.outputs == 1 and not op.required_outputs()


def find_source_joins(flow: Flow, specs: dict[str, OperatorSpec], instances: dict[str, Operator],
                      chains: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The groups ``(source, *chain)`` that run as one task in the manual model, in flow order.

    A source joins when its one output is its only connection and the operator it feeds takes
    it as its only input and may be fused wide (:func:`~elastream.runtime.fusion.fusable`); that
    operator brings the whole chain it heads (``chains``), else joins alone.

    Example: with ``chains == [("a", "b", "out")]``, ``src → a → b → out`` gives ``[("src", "a", "b", "out")]``.
    """
    outs: dict[str, list[Any]] = {}
    ins: dict[str, int] = {}
    for c in flow.connections:
        outs.setdefault(c.src, []).append(c)
        ins[c.dst] = ins.get(c.dst, 0) + 1
    headed = {chain[0]: chain for chain in chains}
    inner = {name for chain in chains for name in chain[1:]}
    groups = []
    for name in flow.operators:
        links = outs.get(name, [])
        if len(links) != 1 or not joinable_source(instances[name], specs[name]):
            continue
        head = links[0].dst
        if (links[0].dst_port == 0 and ins[head] == 1 and head not in inner
                and fusable(instances[head], specs[head], wide=True)):
            groups.append((name, *headed.get(head, (head,))))
    return groups


class SourcedChain(MemberRunner, SourceOperator):
    """A source and the fused chain it feeds, as one operator: :meth:`pull` a batch, :meth:`through` the chain.

    ``names`` / ``members`` are the source's then the chain's; :meth:`counters` gives the source's
    tuples out and pull seconds first, then the chain's members'. ``entry_capacity`` is what the
    chain's input port would hold as a task of its own (snapshots show the call with it).
    """

    kind = Kind.SOURCE

    def __init__(self, source_name: str, source: Operator, source_spec: OperatorSpec, chain: FusedChain,
                 entry_capacity: int = 0):
        super().__init__(outputs=chain.n_outputs)
        self.entry_capacity = entry_capacity
        self.source_name = source_name
        self.source = source
        self.chain = chain
        self.names = (source_name, *chain.names)
        self.members = (source, *chain.members)
        self.kinds = (source_spec.kind, *chain.kinds)
        self._source_spec = source_spec
        whole = chain.spec()
        self._spec = OperatorSpec(kind=Kind.SOURCE, inputs=0, outputs=whole.outputs, driver=Driver.PULL,
                                  output_capacity=whole.output_capacity)
        self.produced = 0
        self.pull_s = 0.0
        self._source_failed = False
        self._source_opened = False
        self._view: _MemberView | None = None
        self._context: Context | None = None
        self._now: Any = None

    @property
    def failed_member(self) -> str | None:  # type: ignore[override]
        """The source, or the chain's member, whose code raised first (None while none has)."""
        return self.source_name if self._source_failed else self.chain.failed_member

    @property
    def views(self) -> tuple[_MemberView, ...]:  # type: ignore[override]
        """Each member's view (the source's first), once bound to a task."""
        return (self._view, *self.chain.views) if self._view is not None else ()

    def bind(self, task: Task) -> None:
        """Give the source and each chain member a context of its own name over ``task`` (at compile time)."""
        self._view = _MemberView(task, self.source_name)
        self._context = Context(self._view, [], [])  # type: ignore[arg-type]
        self.chain.bind(task)

    def spec(self) -> OperatorSpec:
        return self._spec

    def describe(self) -> str:
        return f"{self.source.describe()} → {self.chain.describe()}"

    def instantiate(self) -> SourcedChain:
        """A run's own joined chain over fresh instances of its source and members."""
        return SourcedChain(self.source_name, self.source.instantiate(), self._source_spec, self.chain.instantiate(),
                            self.entry_capacity)

    # -- life cycle ------------------------------------------------------------------------------
    def open(self, ctx: Any) -> None:
        """Open the source with its own context, on the task's clock, then the chain's members in order."""
        self._now = ctx.clock.now
        own = self._context if self._context is not None else ctx
        if own is not ctx:
            own.use_clock(ctx.clock)
        self._source_opened = True  # close() reaches a source whose open raised half-way, as for a task
        try:
            self.source.open(own)
        except BaseException:
            self._source_failed = True
            raise
        self.chain.open(ctx)

    def close(self) -> None:
        """Close the source, then the chain's members (every one, even after an error); the first error is raised."""
        first: BaseException | None = None
        if self._source_opened:
            self._source_opened = False
            try:
                self.source.close()
            except BaseException as exc:  # noqa: BLE001 - the members must close too (sinks flush there)
                first = exc
                if self.failed_member is None:
                    self._source_failed = True
        try:
            self.chain.close()
        except BaseException as exc:  # noqa: BLE001
            first = first or exc
        if first is not None:
            raise first

    # -- data --------------------------------------------------------------------------------------
    def pull(self, max_items: int) -> list | None:
        """The source's next batch (None: exhausted), counted and timed as the source's own."""
        now = self._now
        t0 = now()
        try:
            items = self.source.next_batch(max_items)  # type: ignore[attr-defined]
        except BaseException:
            self._source_failed = True
            raise
        self.pull_s += now() - t0
        if items:
            self.produced += len(items)
        return items

    def through(self, items: list) -> list | None:
        """Run a pulled batch through the chain; what it returns goes to the buffers after it."""
        return self.chain.on_batch(items, 0)

    def end(self) -> list | None:
        """The source is exhausted: the chain's members end in order; their final outputs."""
        return self.chain.on_inputs_closed()

    def next_batch(self, max_items: int) -> list | None:
        """Not called: :class:`SourceChainTask` pulls and runs the chain itself."""
        raise TypeError("a SourcedChain runs as a SourceChainTask (pull, through, end), not as a plain source")

    def counters(self) -> tuple[list[int], list[int], list[float]]:
        """The source's tuples out and pull seconds, then each chain member's tuples in, out and busy seconds."""
        tuples_in, tuples_out, busy = self.chain.counters()
        return [0, *tuples_in], [self.produced, *tuples_out], [self.pull_s, *busy]

    def key_group_load(self) -> tuple[int, ...]:
        return ()


class SourceChainTask(Task):
    """Drives a :class:`SourcedChain`: pull a batch, run it through the chain, emit what comes out.

    ``tuples_in`` counts the tuples the source produced (the chain's input), ``tuples_out`` what
    the chain emitted downstream (none when a sink ends it).
    """

    def __init__(self, name: str, op: SourcedChain, index: int, batch_size: int, spec: OperatorSpec | None = None):
        super().__init__(name, op, index, batch_size, spec)
        self._ended = False

    def run(self, deadline: float) -> Outcome:
        if self.pending and not self.flush_pending():
            return WriteWait(self.pending_buffers())
        if self._ended:
            return COMPLETED
        sched = self.sched
        op: SourcedChain = self.op  # type: ignore[assignment]
        pull, through = op.pull, op.through
        batch = self.batch_size
        while not sched.shutdown_requested:
            items = pull(batch)
            if items is None:
                return self._end_of_stream()
            if not items:
                return PREEMPT  # nothing to pull now: let the scheduler come back, as for a plain source
            self.tuples_in += len(items)
            self.origin = origin = self.now()
            out = through(items)
            if out and not self.emit(0, out, origin):
                return WriteWait(self.pending_buffers())
            if self.now() >= deadline:
                return PREEMPT
        return COMPLETED

    def _end_of_stream(self) -> Outcome:
        self._ended = True
        if self.sched.shutdown_requested:
            return COMPLETED  # a stream cut short by a shutdown runs no end-of-input hook
        final = self.op.end()  # type: ignore[attr-defined]
        if final and not self.emit(0, final, self.origin):
            return WriteWait(self.pending_buffers())
        return COMPLETED
