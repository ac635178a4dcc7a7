"""Operator fusion: a chain of stateless function operators runs as one task (Flink's chaining, IBM Streams' fusion).

Role: a compile pass (runtime.refuse regroups a running flow). :func:`find_chains` finds the maximal chains of
consecutive operators that may fuse (:func:`fusable`: stateless, driven batch
by batch, one input and one output, no control input, not a replica) linked
by a connection that is the upstream's only output and the downstream's only
input. :func:`~elastream.runtime.compile.compile_flow` then gives each chain
one task whose operator is a :class:`FusedChain`, so a tuple pays one buffer
hop for the whole chain instead of one per operator. Per batch the chain runs
its steps (:func:`plan_steps`, made once when it opens, never per tuple) over
the whole list: each run of two or more Maps is one generated list
comprehension calling their functions on each tuple in turn
(:class:`Composed`, as a hand-unrolled loop would), every other member its
own ``on_batch``.

What stays per operator:

* statistics: tuples in and out per member are counted per batch (exact); busy
  time is timed per member and batch where members run one by one, and for
  composed Maps one batch in :data:`SAMPLE_EVERY` runs member by member, timed,
  and the composed calls' time is shared out in those proportions (sampled and
  extrapolated). The snapshot (:func:`elastream.runtime.snapshot.member_stats`)
  lists every member as an operator of its own;
* errors: the member that raised is recorded in :attr:`FusedChain.failed_member`,
  which the scheduler names instead of the chain, with the member's traceback
  (in a composed call, the line that raised tells the member, and the error
  gets the note the member's own ``on_batch`` would add, naming its record:
  the members before it are called once more on that one record to find it);
* end of stream: members' ``on_inputs_closed`` run in order, each one's final
  outputs going through the members after it;
* each member opens with a context of its own name (its logger, its
  malformed-record count), the chain's scheduler and deadline behind it.

Threading: a fused chain is stateless, so under dynamic allotment (threads > 1)
several workers may run one chain at once like one stateless operator; on
several threads only members that allow several workers fuse (an operator
bound to one worker stays a task of its own, which its neighbours can run
beside). The counters are updated under a small lock, once per batch, and read
under it by :meth:`FusedChain.counters`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

from elastream.operators.base import FunctionOperator, Operator
from elastream.operators.spec import Driver, Kind, OperatorSpec
from elastream.operators.user_code import note_failed_record
from elastream.runtime.composed import NO_RECORD, Composed
from elastream.runtime.context import Context

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow
    from elastream.runtime.task import Task


def fusable(op: Operator, spec: OperatorSpec, wide: bool = False) -> bool:
    """May this operator be a member of a fused chain? (Its spec says so, not its class.)

    ``wide`` (the manual model, one thread for the whole flow: nothing runs beside a chain, nothing is
    replicated) also fuses stateful and partitioned batch operators, and sinks (as a chain's last member).
    """
    kinds = _WIDE_KINDS if wide else _STATELESS
    return (spec.kind in kinds and spec.driver is Driver.BATCH and spec.inputs == 1
            and (spec.outputs == 1 or (wide and spec.kind is Kind.SINK and spec.outputs == 0))
            and spec.reports_as is None and not op.control_inputs and not op.required_outputs())


_STATELESS = frozenset({Kind.STATELESS})
_WIDE_KINDS = frozenset({Kind.STATELESS, Kind.PARTITIONED, Kind.STATEFUL, Kind.SINK})


def find_chains(flow: Flow, specs: dict[str, OperatorSpec], instances: dict[str, Operator],
                threads: int = 1, wide: bool = False) -> list[tuple[str, ...]]:
    """The maximal chains (two operators or more) that may run as one task, each in flow order; chains in flow order.

    With ``threads > 1`` only members that several workers may run at once fuse: a chain
    of them is shared like one stateless operator, while fusing an operator bound to one
    worker would take from its neighbours the worker they could run on beside it.
    ``wide``: see :func:`fusable` (a sink has no output, so it can only end a chain).

    Example: for ``src → a(map) → b(filter) → k(keyed) → c(map) → d(map) → out`` the chains are
    ``[("a", "b"), ("c", "d")]``.
    """
    outs: dict[str, int] = {}
    ins: dict[str, int] = {}
    for c in flow.connections:
        outs[c.src] = outs.get(c.src, 0) + 1
        ins[c.dst] = ins.get(c.dst, 0) + 1
    ok = {name for name, op in instances.items()
          if fusable(op, specs[name], wide) and (threads == 1 or specs[name].max_workers > 1)}
    following: dict[str, str] = {}
    for c in flow.connections:
        if (c.src in ok and c.dst in ok and c.src_port == 0 and c.dst_port == 0
                and outs[c.src] == 1 and ins[c.dst] == 1):
            following[c.src] = c.dst
    preceded = set(following.values())
    chains = []
    for name in flow.operators:
        if name in following and name not in preceded:  # a chain's head (a cycle has none: never fused)
            chain = [name]
            while chain[-1] in following:
                chain.append(following[chain[-1]])
            chains.append(tuple(chain))
    return chains


def chain_spec(specs: Sequence[OperatorSpec]) -> OperatorSpec:
    """The spec of a chain of ``specs``: one in, out as its last member; workers bounded by its tightest member.

    Stateless when every member is; a wide chain (the manual model) is a sink when one ends it, else stateful.

    Its declared cost is per input tuple of the chain: each member's cost weighted by
    the selectivity of the members before it (1 where undeclared); None if any is unknown.
    """
    cost: float | None = 0.0
    selectivity: float | None = 1.0
    for s in specs:
        reach = selectivity if selectivity is not None else 1.0
        cost = None if cost is None or s.cost_us is None else cost + s.cost_us * reach
        selectivity = None if selectivity is None or s.selectivity is None else selectivity * s.selectivity
    kinds = {s.kind for s in specs}
    kind = Kind.STATELESS if kinds == {Kind.STATELESS} else Kind.SINK if specs[-1].kind is Kind.SINK else Kind.STATEFUL
    return OperatorSpec(
        kind=kind, inputs=1, outputs=specs[-1].outputs, driver=Driver.BATCH,
        max_workers=min(s.max_workers for s in specs), one_to_one=all(s.one_to_one for s in specs),
        input_capacity=specs[0].input_capacity, output_capacity=specs[-1].output_capacity,
        cost_us=cost, selectivity=selectivity)


def fused_name(names: Sequence[str]) -> str:
    """The task name of a chain (what ``handle.states()`` and errors never show: they name members)."""
    return "+".join(names)


class _MemberView:
    """What a member's :class:`Context` reads of its task: its own name and malformed count, the chain's
    scheduler and deadline (a member never waits on ports: the chain's task does that)."""

    __slots__ = ("name", "malformed", "conj_waits", "disj_waits", "_task")

    def __init__(self, task: Task, name: str):
        self.name = name
        self.malformed = 0
        self.conj_waits = 0
        self.disj_waits = 0
        self._task = task

    @property
    def sched(self) -> Any:
        return self._task.sched

    @property
    def deadline(self) -> float:
        return self._task.deadline


#: A chain with composed Maps runs one batch in this many stage by stage through each member's own
#: ``on_batch``, timed per member; those batches give the members' shares of the composed calls' time.
SAMPLE_EVERY = 64




def composable(spec: OperatorSpec) -> bool:
    """A member whose batch is exactly ``list(map(fn, items))`` (its declared transform): it can be composed."""
    declared = spec.declared
    return declared is not None and declared.transform == "map" and declared.fn is not None and spec.one_to_one


def plan_steps(specs: Sequence[OperatorSpec]) -> list[tuple[int, int]]:
    """The chain cut into steps ``(first member, members)``: runs of two composable members or more, else one."""
    steps: list[tuple[int, int]] = []
    i, n = 0, len(specs)
    while i < n:
        j = i
        while j < n and composable(specs[j]):
            j += 1
        if j - i >= 2:
            steps.append((i, j - i))
            i = j
        else:
            steps.append((i, 1))
            i += 1
    return steps


class MemberRunner:
    """What runs several of the user's operators as one task, each still named and counted on its own.

    :class:`FusedChain` and the manual model's source joined to its chain
    (:class:`~elastream.runtime.sourced.SourcedChain`) are one. ``names`` and ``members`` are the
    operators in flow order; ``views`` their member views once bound; ``failed_member`` the one whose
    code raised first (None while none has); :meth:`counters` each one's tuples in, out and busy seconds;
    ``kinds`` each one's own :class:`Kind` (a snapshot lists a chain's sink as a sink, its Maps as stateless).
    """

    names: tuple[str, ...]
    members: tuple[Operator, ...]
    kinds: tuple[Kind, ...]
    views: tuple[_MemberView, ...]
    failed_member: str | None

    def counters(self) -> tuple[list[int], list[int], list[float]]:
        """Each member's tuples in, tuples out and busy seconds so far."""
        raise NotImplementedError


#: What a pickled chain leaves behind (made again by ``__setstate__``).
_UNPICKLED = frozenset({"views", "_contexts", "_stages", "_steps", "_lock", "_now"})


class FusedChain(MemberRunner, FunctionOperator):
    """The operator of a fused chain's task: its members stage after stage, per batch.

    ``names`` and ``members`` are the chain's operator names and run instances in
    flow order; :meth:`counters` gives each member's tuples in and out and busy
    seconds (measured, or estimated from the sampled shares where composed).
    """

    kind = Kind.STATELESS

    def __init__(self, names: Sequence[str], members: Sequence[Operator], specs: Sequence[OperatorSpec]):
        super().__init__(inputs=1, outputs=specs[-1].outputs)  # no output when a sink ends it (wide fusion)
        self.names = tuple(names)
        self.members = tuple(members)
        self._specs = tuple(specs)
        self._spec = chain_spec(specs)
        self.kinds = tuple(s.kind for s in specs)
        n = len(self.members)
        # Per member: what ran stage by stage (sampled batches, end of stream, chains without composition).
        self._in = [0] * n
        self._out = [0] * n
        self._s = [0.0] * n
        # Per step of the composed path: its tuples in and out and seconds (members share them in counters()).
        self._step_in: list[int] = []
        self._step_out: list[int] = []
        self._step_s: list[float] = []
        #: The member whose code raised first (the scheduler names it), None while none has.
        self.failed_member: str | None = None
        self.views: tuple[_MemberView, ...] = ()
        self._contexts: tuple[Context, ...] = ()
        self._stages: tuple[Callable[[list, int], Any], ...] = ()
        # Steps of the composed path: (first member, members, call, composed run or None).
        self._steps: tuple[tuple[int, int, Callable[[list, int], Any], Composed | None], ...] = ()
        self._sampled_s = [0.0] * n      # per member: time measured in the stage-by-stage batches
        self._shares = [1.0] * n         # per member: its share of its composed step's time
        self._countdown = 0
        self._now: Callable[[], float] = perf_counter
        self._lock = threading.Lock()
        self._opened = 0

    def bind(self, task: Task) -> None:
        """Give each member a context of its own name over ``task`` (at compile time)."""
        self.views = tuple(_MemberView(task, name) for name in self.names)
        self._contexts = tuple(Context(view, [], []) for view in self.views)  # type: ignore[arg-type]

    def spec(self) -> OperatorSpec:
        return self._spec

    def describe(self) -> str:
        return " → ".join(op.describe() for op in self.members)

    # -- life cycle ------------------------------------------------------------------------------
    def instantiate(self) -> FusedChain:
        """A run's own chain over the run's own member instances (a replicated chain: one per replica)."""
        chain = FusedChain(self.names, [op.instantiate() for op in self.members], self._specs)
        chain.failed_member = None
        return chain

    def __getstate__(self) -> dict:
        # A chain replicated into a worker process (elastic.units) crosses as its members; the lock, the
        # task views and the bound stages are made again there.
        return {k: v for k, v in self.__dict__.items() if k not in _UNPICKLED}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.update(views=(), _contexts=(), _stages=(), _steps=(), _lock=threading.Lock())

    def open(self, ctx: Any) -> None:
        """Open every member in order with its own context, on the chain's clock; bind the stages once.

        A chain that no task bound (one replicated as a unit behind an ordered split) opens its
        members with the context it is given.
        """
        self._now = ctx.clock.now
        contexts = self._contexts or (ctx,) * len(self.members)
        for i, (op, member_ctx) in enumerate(zip(self.members, contexts)):
            if member_ctx is not ctx:
                member_ctx.use_clock(ctx.clock)
            self._opened = i + 1  # close() reaches a member whose open raised half-way, as for a task
            try:
                op.open(member_ctx)
            except BaseException:
                self._fail(i)
                raise
        self.bind_stages()

    def bind_stages(self) -> None:
        """Bind each member's ``on_batch`` and compose runs of Maps, once (open, or a chain of opened members)."""
        self._stages = tuple(op.on_batch for op in self.members)  # type: ignore[attr-defined]
        self._steps = tuple(self._make_step(first, count) for first, count in plan_steps(self._specs))
        if all(count == 1 for _, count, _, _ in self._steps):
            self._steps = ()              # nothing composed: every batch runs stage by stage
        for first, count, _, _ in self._steps:
            for j in range(first, first + count):
                self._shares[j] = 1.0 / count  # until the first timed batch
        steps = len(self._steps)
        self._step_in, self._step_out, self._step_s = [0] * steps, [0] * steps, [0.0] * steps
        self._countdown = 0

    def _make_step(self, first: int, count: int) -> tuple[int, int, Callable[[list, int], Any], Composed | None]:
        if count == 1:
            return first, 1, self._stages[first], None
        fns = [self._specs[j].declared.fn for j in range(first, first + count)]  # type: ignore[union-attr]
        composed = Composed(fns, f"{self.names[first]}..{self.names[first + count - 1]}")  # type: ignore[arg-type]
        return first, count, composed.run, composed

    def close(self) -> None:
        """Close every opened member in order; the first error is raised once all have closed."""
        first: BaseException | None = None
        opened, self._opened = self._opened, 0
        for i in range(opened):
            try:
                self.members[i].close()
            except BaseException as exc:  # noqa: BLE001 - the others must close too (sinks flush there)
                if first is None:
                    first = exc
                    self._fail(i)
        if first is not None:
            raise first

    def _fail(self, i: int) -> None:
        if self.failed_member is None:
            self.failed_member = self.names[i]

    # -- data --------------------------------------------------------------------------------------
    def on_batch(self, items: list, port: int) -> list | None:
        """Run the batch through the chain: composed where members compose, timed stage by stage in samples."""
        if self._steps:
            self._countdown -= 1
            if self._countdown >= 0:
                return self._run_steps(items)
            self._countdown = SAMPLE_EVERY - 1
        return self._run_stages(items)

    def _run_stages(self, items: list, first: int = 0) -> list | None:
        """Each member's own ``on_batch`` in turn from member ``first``, timed; stop once a stage leaves nothing."""
        now = self._now
        marks = [now()]
        sizes = [len(items)]
        i = first
        try:
            for i, stage in enumerate(self._stages[first:], first):  # noqa: B007 - i names the member that raises
                items = stage(items, 0)
                marks.append(now())
                if not items:
                    sizes.append(0)
                    break
                sizes.append(len(items))
        except BaseException:
            self._fail(i)
            raise
        self._record_stages(sizes, marks, first)
        return items

    def _record_stages(self, sizes: list[int], marks: list[float], first: int = 0) -> None:
        tuples_in, tuples_out, stage_s = self._in, self._out, self._s
        with self._lock:  # workers sharing the chain (dynamic allotment) add their batches one at a time
            for j in range(len(sizes) - 1):
                tuples_in[first + j] += sizes[j]
                tuples_out[first + j] += sizes[j + 1]
                stage_s[first + j] += marks[j + 1] - marks[j]
            if self._steps and not first:
                self._update_shares(marks)

    def _update_shares(self, marks: list[float]) -> None:
        """Fold a stage-by-stage batch into each composed member's share of its step's time (lock held)."""
        sampled = self._sampled_s
        for first, count, _, composed in self._steps:
            if composed is None or first + count >= len(marks):
                continue
            for j in range(first, first + count):
                sampled[j] += marks[j + 1] - marks[j]
            total = sum(sampled[first:first + count])
            if total > 0:
                for j in range(first, first + count):
                    self._shares[j] = sampled[j] / total

    def _run_steps(self, items: list) -> list | None:
        """The composed path: a run of Maps is one call per tuple; its time is shared by the sampled shares."""
        now = self._now
        marks = [now()]
        sizes = [len(items)]
        k = 0
        try:
            for k, (_, _, call, _) in enumerate(self._steps):  # noqa: B007 - k names the step that raises
                items = call(items, 0)
                marks.append(now())
                if not items:
                    sizes.append(0)
                    break
                sizes.append(len(items))
        except BaseException as exc:
            self._blame(k, exc)
            raise
        self._record_steps(sizes, marks)
        return items

    def _record_steps(self, sizes: list[int], marks: list[float]) -> None:
        step_in, step_out, step_s = self._step_in, self._step_out, self._step_s
        with self._lock:
            for k in range(len(sizes) - 1):
                step_in[k] += sizes[k]
                step_out[k] += sizes[k + 1]
                step_s[k] += marks[k + 1] - marks[k]

    def counters(self) -> tuple[list[int], list[int], list[float]]:
        """Each member's tuples in, tuples out and busy seconds so far (a composed step's time by its shares)."""
        with self._lock:
            tuples_in, tuples_out, busy = list(self._in), list(self._out), list(self._s)
            for k, (first, count, _, _) in enumerate(self._steps):
                for j in range(first, first + count):  # composed members are one-to-one: in = out for each
                    tuples_in[j] += self._step_in[k]
                    tuples_out[j] += self._step_out[k]
                    busy[j] += self._step_s[k] * self._shares[j]
        return tuples_in, tuples_out, busy

    def _blame(self, k: int, exc: BaseException) -> None:
        """Name the member that raised in step ``k``: in a composed run, the line that raised tells which,
        and the error gets the note that member's own ``on_batch`` adds (the record it failed on)."""
        first, _, _, composed = self._steps[k]
        if composed is None:
            self._fail(first)
            return
        offset, record = composed.failure(exc)
        member = first + (offset or 0)
        self._fail(member)
        if record is not NO_RECORD and isinstance(exc, Exception):
            note_failed_record(exc, self.members[member].describe(), record)

    def on_inputs_closed(self) -> list | None:
        """End of stream, member after member: each one's final outputs go through the members after it."""
        carry: list = []
        now = self._now
        for i, op in enumerate(self.members):
            t0 = now()
            try:
                out = list(self._stages[i](carry, 0) or ()) if carry else []
                end = op.on_inputs_closed()  # type: ignore[attr-defined]
            except BaseException:
                self._fail(i)
                raise
            if end:
                out.extend(end)
            with self._lock:
                self._in[i] += len(carry)
                self._out[i] += len(out)
                self._s[i] += now() - t0
            carry = out
        return carry or None


def fused_chain(task: Task) -> FusedChain | None:
    """The chain ``task`` runs, or None for a task of one operator."""
    op = task.op
    return op if isinstance(op, FusedChain) else None


def member_runner(task: Task) -> MemberRunner | None:
    """What runs ``task``'s several operators (a fused chain, or a source joined to one), or None for one operator."""
    op = task.op
    return op if isinstance(op, MemberRunner) else None


def member_names(task: Task) -> tuple[str, ...]:
    """The user's operators a task runs: a fused chain's members (a joined source first), else its own name."""
    runner = member_runner(task)
    return runner.names if runner is not None else (task.name,)


def entry_name(task: Task) -> str:
    """The operator whose input port ``task``'s input is (a chain's first member)."""
    runner = member_runner(task)
    return runner.names[0] if runner is not None else task.name
