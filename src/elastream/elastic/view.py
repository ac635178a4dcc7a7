"""The flow as the controllers see it: one period's statistics grouped into logical units.

The statistics of a running flow name what actually runs: a replicated
operator ``sum`` appears as ``sum#split``, its replicas ``sum#0``, ``sum#1`` …
and ``sum#merge``; a fused chain still reports every member. Controllers
reason about the operators the user wrote, so :func:`flow_view` folds one
:class:`~elastream.metrics.period.PeriodStats` into :class:`Unit` values — one
per operator, or one per fused chain — with their logical edges, how many
instances take work, and how congested their input and output were over the
period (C-Stream §4.2.1's write-blocked ratios, per period rather than over
the whole run, so a fixed bottleneck stops looking congested at once).

Threading: pure functions over immutable snapshots; call from any thread.

Example::

    view = flow_view(period, levels)
    view.units["slow"].input_congestion     # fraction of the period its input port was full
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from elastream.metrics.period import OperatorPeriod, PeriodStats
from elastream.ordered.replicate import SEP, parse_replica_name
from elastream.runtime.decisions import Levels
from elastream.runtime.fusion import fused_name

#: Kinds whose operators may run as several instances (ordered-multicore §1.1).
PARALLEL_KINDS = frozenset({"stateless", "partitioned"})

#: Busy share of the threads above which they count as saturated: a source that then neither sent
#: nor waited was waiting for one of them (starved).
SATURATED = 0.9


@dataclass(frozen=True, slots=True)
class Unit:
    """One operator, or one fused chain, over one period (instances summed)."""

    name: str
    """The operator's name (a fused chain: its first operator's)."""
    members: tuple[str, ...]
    kind: str
    instances: int
    """Replicas taking work (1 when not replicated)."""
    tuples_in: int
    """Tuples that entered the unit."""
    tuples_out: int
    processed: int
    """Tuples its instances handled (a replicated unit: what its merge put out, exact for one-to-one operators)."""
    busy_s: float
    """Busy seconds of every instance (useful time: neither waiting for input nor back-pressured)."""
    cpu_s: float
    write_blocked_s: float
    input_congestion: float
    """Fraction of the period its input was full: its producers waited on it (Algorithm 9's iport ratio)."""
    output_congestion: float
    """Fraction of the period it waited on a full downstream port (Algorithm 9's oport ratio)."""
    downstream: dict[str, int] = field(default_factory=dict)
    """Tuples sent to each downstream unit over the period."""
    read_blocked_s: float = 0.0
    """Seconds it waited for input (a source: for data outside the flow, or for its next arrival time)."""
    starved_s: float = 0.0
    """A live source on saturated threads: seconds it was ready to send but no worker was free
    (neither sending, nor waiting for data, nor for room downstream). 0 for every other unit."""
    upstream: tuple[str, ...] = ()
    key_group_load: tuple[int, ...] = ()
    handled: int = 0
    """Tuples handled summed over its operators (a fused chain of three counts each tuple three times)."""
    backlog: int = 0
    """Tuples waiting at its input at the period's end (a replicated unit: at its split and replicas)."""

    @property
    def is_source(self) -> bool:
        """True for a source (no input)."""
        return self.kind == "source"

    @property
    def is_sink(self) -> bool:
        """True for a sink (no output)."""
        return self.kind == "sink"

    @property
    def is_parallel(self) -> bool:
        """True when it may run as several instances: stateless or partitioned, one input and one output.

        (Algorithm 9's candidates; the port counts are read off the period's edges.)
        """
        return self.kind in PARALLEL_KINDS and len(self.upstream) <= 1 and len(self.downstream) <= 1

    @property
    def true_rate(self) -> float:
        """Tuples per busy second of one instance (DS2's true processing rate); 0 when it did not run."""
        return self.processed / self.busy_s if self.busy_s > 0 else 0.0

    @property
    def selectivity(self) -> float:
        """Tuples out per tuple in (1.0 when nothing came in)."""
        return self.tuples_out / self.tuples_in if self.tuples_in else 1.0

    @property
    def cpu_per_tuple_s(self) -> float:
        """CPU seconds per handled tuple (busy seconds where no CPU time was measured)."""
        if not self.processed:
            return 0.0
        return (self.cpu_s if self.cpu_s > 0 else self.busy_s) / self.processed

    @property
    def waits_off_cpu(self) -> bool:
        """True when most of its busy time used no CPU: it waits with the GIL released (blocking I/O)."""
        return self.busy_s > 0 and 0 < self.cpu_s < 0.5 * self.busy_s


@dataclass(frozen=True, slots=True)
class FlowView:
    """A period's units, in the statistics' (flow) order, and the period's length."""

    period_s: float
    units: dict[str, Unit]
    overhead_cpu_s: float = 0.0
    """CPU seconds of the machinery no unit owns (replicas' splits and merges)."""

    def sources(self) -> list[Unit]:
        """The source units."""
        return [u for u in self.units.values() if u.is_source]

    def throughput(self) -> float:
        """Tuples per second handled by every unit, sources' output included (IBM §5.4's PE throughput).

        Counted per operator the user wrote, so adding replicas (a split and a
        merge more) or fusing a chain does not by itself change it.
        """
        if self.period_s <= 0:
            return 0.0
        return sum(u.handled for u in self.units.values()) / self.period_s

    def topological(self) -> list[Unit]:
        """Units from the sources downwards (every unit after all of its upstream units; Kahn's order).

        Units on a cycle (feedback through control ports) follow in flow order.
        """
        waiting = {name: sum(1 for up in u.upstream if up in self.units) for name, u in self.units.items()}
        ready = [name for name, n in waiting.items() if n == 0]
        order: list[Unit] = []
        while ready:
            unit = self.units[ready.pop(0)]
            order.append(unit)
            for dst in unit.downstream:
                if dst in waiting and waiting[dst] > 0:
                    waiting[dst] -= 1
                    if waiting[dst] == 0:
                        ready.append(dst)
        placed = {u.name for u in order}
        return order + [u for name, u in self.units.items() if name not in placed]


def period_throughput(period: PeriodStats) -> float:
    """:meth:`FlowView.throughput` straight from a period, without building the view (what thread controllers read).

    Example: ``period_throughput(period) == flow_view(period).throughput()``
    """
    if period.period_s <= 0:
        return 0.0
    total = 0
    for name, op in period.operators.items():
        role = _role(name)
        if role == "merge" or (role == "operator" and op.kind == "source"):
            total += op.tuples_out
        elif role == "operator":
            total += op.tuples_in
    return total / period.period_s


@functools.lru_cache(maxsize=4096)
def _role(name: str) -> str:
    """What a statistics name is: "replica", "split", "merge" (of a replicated operator) or "operator"."""
    if parse_replica_name(name) is not None:
        return "replica"
    for role in ("split", "merge"):
        if name.endswith(f"{SEP}{role}"):
            return role
    return "operator"


@functools.lru_cache(maxsize=4096)
def logical_name(name: str) -> str:
    """The operator a statistics name belongs to: ``"sum#1"``, ``"sum#split"``, ``"sum#merge"`` → ``"sum"``.

    Example: ``logical_name("parse") == "parse"``
    """
    replica = parse_replica_name(name)
    if replica is not None:
        return replica[0]
    for role in ("split", "merge"):
        suffix = f"{SEP}{role}"
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


#: The last view made, with its period and levels: the controllers deciding over one period (DS2, the
#: thread controllers' room bound) share it instead of folding the period again. One entry, replaced
#: whole (so read whole from any thread); a view is immutable.
_last_view: list[tuple[PeriodStats, Levels | None, FlowView] | None] = [None]


def flow_view(period: PeriodStats, levels: Levels | None = None) -> FlowView:
    """Fold ``period`` into units: replicas, splits and merges into their operator, fused chains into one.

    Example: ``flow_view(period, Levels(fused=(("a", "b"),))).units["a"].members == ("a", "b")``
    """
    last = _last_view[0]
    if last is not None and last[0] is period and last[1] == levels:
        return last[2]
    view = _fold(period, levels or Levels())
    _last_view[0] = (period, levels, view)
    return view


def _fold(period: PeriodStats, levels: Levels) -> FlowView:
    """:func:`flow_view` without the shared last view."""
    chain_of = _chain_index(levels.fused, period.operators)
    unit_of = {name: chain_of.get(logical_name(name), logical_name(name)) for name in period.operators}
    groups: dict[str, list[OperatorPeriod]] = {}
    for name, op in period.operators.items():
        groups.setdefault(unit_of[name], []).append(op)
    edges = _logical_edges(period, unit_of)
    upstream: dict[str, list[str]] = {u: [] for u in groups}
    for src, sent in edges.items():
        for dst in sent:
            upstream.setdefault(dst, []).append(src)
    span = period.period_s if period.period_s > 0 else 1.0
    units = {}
    overhead = 0.0
    for name, ops in groups.items():
        unit, machinery_cpu = _unit(name, ops, levels, edges.get(name, {}), tuple(upstream.get(name, ())), span)
        units[name] = unit
        overhead += machinery_cpu
    units = {name: _with_input_congestion(u, units, period, span) for name, u in units.items()}
    if _threads_saturated(period, levels):
        ended = {name for name, ops in groups.items() if all(o.ended for o in ops)}
        units = {name: _with_starvation(u, span) if u.is_source and name not in ended else u
                 for name, u in units.items()}
    return FlowView(period_s=period.period_s, units=units, overhead_cpu_s=overhead)


def _threads_saturated(period: PeriodStats, levels: Levels) -> bool:
    """True when the working processes' threads were busy nearly all the period (SATURATED) they ran.

    A run's first period starts before its threads do (~30 ms of a first look at 0.2 s, which then
    never found its source starved: busy 0.207 s of 0.245 s, of 0.216 s alive).
    """
    threads = sum(levels.threads[:max(1, levels.working_processes)])
    return period.period_s > 0 and period.busy_s() >= SATURATED * period.capacity_ran(threads * period.period_s)


def _with_starvation(source: Unit, span: float) -> Unit:
    """``source`` with the time it was neither sending nor waiting: it waited for a worker thread."""
    return replace(source, starved_s=max(0.0, span - source.busy_s - source.read_blocked_s - source.write_blocked_s))


def _chain_index(fused: Iterable[tuple[str, ...]], operators: dict[str, OperatorPeriod]) -> dict[str, str]:
    """Member name → its chain's unit name (the first member), for chains whose members are all reported.

    A chain run as one replicated operator named after its members (``"a+b+c#0"``…,
    elastic.units) is that unit: its members' own statistics are folded into it.
    """
    index: dict[str, str] = {}
    known = {logical_name(n) for n in operators}
    for chain in fused:
        if fused_name(chain) in known:
            index.update((member, fused_name(chain)) for member in chain)
        elif chain and all(member in known for member in chain):
            for member in chain:
                index[member] = chain[0]
    return index


def _logical_edges(period: PeriodStats, unit_of: dict[str, str]) -> dict[str, dict[str, int]]:
    """Tuples sent between distinct units (edges inside a unit — split to replica, chain members — dropped)."""
    edges: dict[str, dict[str, int]] = {}
    for name, op in period.operators.items():
        src = unit_of[name]
        for dst_name, n in op.sent.items():
            dst = unit_of.get(dst_name, logical_name(dst_name))
            if dst != src:
                edges.setdefault(src, {})
                edges[src][dst] = edges[src].get(dst, 0) + n
    return edges


def _unit(name: str, ops: list[OperatorPeriod], levels: Levels, downstream: dict[str, int],
          upstream: tuple[str, ...], span: float) -> tuple[Unit, float]:
    """One unit from its operators' periods; also the CPU seconds of its split and merge."""
    split = next((o for o in ops if o.name == f"{name}{SEP}split"), None)
    merge = next((o for o in ops if o.name == f"{name}{SEP}merge"), None)
    workers = [o for o in ops if o is not split and o is not merge]
    replicas = [o for o in workers if parse_replica_name(o.name) is not None]
    bypass = next((o for o in ops if o.name == name), None) if split is not None else None
    if bypass is not None and split.tuples_in == 0:
        if name in levels.moved:  # moved whole into another process: its replica there counts tuples, not pieces
            return _whole_unit(name, [bypass, *replicas], downstream, upstream, span), 0.0
        workers, replicas = [bypass], []  # a held unit running unreplicated (runtime.bypass): the bypass is it
    first, last = (workers[0], workers[-1]) if workers else (ops[0], ops[-1])
    if split is not None and merge is not None and replicas:
        unit = _replicated_unit(name, split, merge, replicas, levels, downstream, upstream, span)
        return unit, split.cpu_s + merge.cpu_s
    busy = sum(o.busy_s for o in workers)
    load = next((o.key_group_load for o in ops if o.key_group_load), ())
    return Unit(
        name=name, members=tuple(o.name for o in workers), kind=_unit_kind(workers), instances=1,
        tuples_in=first.tuples_in, tuples_out=last.tuples_out,
        processed=first.tuples_out if first.kind == "source" else first.tuples_in, busy_s=busy,
        cpu_s=sum(o.cpu_s for o in workers), write_blocked_s=sum(o.write_blocked_s for o in workers),
        read_blocked_s=sum(o.read_blocked_s for o in workers), input_congestion=0.0,
        output_congestion=_fraction(max(o.write_blocked_s for o in workers), span),
        downstream=dict(downstream), upstream=upstream, key_group_load=load,
        handled=sum(o.tuples_out if o.kind == "source" else o.tuples_in for o in workers),
        backlog=first.queue_length), 0.0


def _whole_unit(name: str, workers: list[OperatorPeriod], downstream: dict[str, int], upstream: tuple[str, ...],
                span: float) -> Unit:
    """A held unit that moved whole (runtime.bypass): its bypass until then, its replica in the other process
    since (one after the other: their counters add up)."""
    return Unit(
        name=name, members=(name,), kind=_unit_kind(workers), instances=1,
        tuples_in=sum(o.tuples_in for o in workers), tuples_out=sum(o.tuples_out for o in workers),
        processed=sum(o.tuples_in for o in workers), busy_s=sum(o.busy_s for o in workers),
        cpu_s=sum(o.cpu_s for o in workers), write_blocked_s=sum(o.write_blocked_s for o in workers),
        read_blocked_s=sum(o.read_blocked_s for o in workers), input_congestion=0.0,
        output_congestion=_fraction(max(o.write_blocked_s for o in workers), span),
        downstream=dict(downstream), upstream=upstream, key_group_load=(),
        handled=sum(o.tuples_in for o in workers), backlog=sum(o.queue_length for o in workers))


def _replicated_unit(name: str, split: OperatorPeriod, merge: OperatorPeriod, replicas: list[OperatorPeriod],
                     levels: Levels, downstream: dict[str, int], upstream: tuple[str, ...], span: float) -> Unit:
    """A replicated operator: tuples counted at its split and merge (replicas count pieces, not tuples).

    Algorithm 9 averages the replicas' input ratios; here the split waits whenever one
    replica's port is full, so its blocked fraction is the input's congestion, and the
    replicas' mean blocked fraction (or the merge's, when it waits downstream) the output's.
    """
    active = levels.replicas.get(name) or sum(1 for r in replicas if r.busy_s > 0) or len(replicas)
    replica_blocked = sum(r.write_blocked_s for r in replicas) / max(1, active)
    return Unit(
        name=name, members=(name,), kind=replicas[0].kind, instances=active, tuples_in=split.tuples_in,
        tuples_out=merge.tuples_out, processed=merge.tuples_out, busy_s=sum(r.busy_s for r in replicas),
        cpu_s=sum(r.cpu_s for r in replicas), write_blocked_s=replica_blocked,
        input_congestion=_fraction(split.write_blocked_s, span),
        output_congestion=max(_fraction(replica_blocked, span), _fraction(merge.write_blocked_s, span)),
        downstream=dict(downstream), upstream=upstream, key_group_load=split.key_group_load,
        handled=merge.tuples_out, backlog=split.queue_length + sum(r.queue_length for r in replicas))


def _with_input_congestion(unit: Unit, units: dict[str, Unit], period: PeriodStats, span: float) -> Unit:
    """``unit`` with its input congestion: how long its producers waited on it (unless it is replicated).

    A producer with several consumers waits on whichever port is full; it is
    charged to this unit only when this unit's input queue is the longest of them.
    """
    if unit.instances > 1 or unit.input_congestion > 0:
        return unit
    queue = _queue(unit, period)
    worst = 0.0
    for up_name in unit.upstream:
        up = units.get(up_name)
        if up is None:
            continue
        rivals = [_queue(units[d], period) for d in up.downstream if d in units and d != unit.name]
        if all(queue >= q for q in rivals):
            worst = max(worst, up.output_congestion)
    return replace(unit, input_congestion=worst) if worst > 0 else unit


def _queue(unit: Unit, period: PeriodStats) -> int:
    first = period.operators.get(unit.members[0]) if unit.members else None
    return first.queue_length if first is not None else 0


def _unit_kind(ops: list[OperatorPeriod]) -> str:
    """A chain's kind: stateless when every member is, else the first non-stateless member's kind."""
    kinds = [o.kind for o in ops]
    return next((k for k in kinds if k != "stateless"), "stateless")


def _fraction(seconds: float, span: float) -> float:
    return min(1.0, max(0.0, seconds / span))
