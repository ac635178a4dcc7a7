"""Fused chains of a multi-process run: which chains run as one task, and their members' own statistics.

Two kinds of chain run fused in a multi-process run:

* chains each part fuses when it compiles its own operators
  (:func:`~elastream.runtime.fusion.find_chains`); the part's snapshot already lists
  their members as operators of their own;
* chains :mod:`elastream.elastic.units` fused into one
  :class:`~elastream.runtime.fusion.FusedChain` operator before the run, replicated
  across processes as ``"a+b+c#0"``, ``"a+b+c#1"``. A replica reports as one operator
  (counting the pieces its split sent it), so each part adds its members' own
  statistics (:func:`with_members`: tuples in and out per member, the replica's busy
  time shared out by the members' measured stage times) and the parent sums them over
  the replicas (:func:`add_operator_stats`), so that ``a``, ``b`` and ``c`` appear in
  the run's statistics as they do in a threads run, beside the replicas, splits and
  merges that the controllers read by the unit's name.

Threading: pure functions of immutable snapshots and of a chain's counters (read under
the chain's own lock); called from a part's control loop or the parent's threads.

Example::

    chains = replicated_chains(spec.operators)   # {"a+b+c#1": ("a", "b", "c")}
    stats = with_members(handle.stats(), handle, chains)
    stats.operators["b"].tuples_in               # what member b of replica 1 was given
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from elastream.metrics.stats import FlowStats, OperatorStats, PortStats
from elastream.ordered.replica import OrderedReplica
from elastream.processes.spec import ChildSpec, build_child_flow
from elastream.runtime.decisions import Fuse, Unfuse, fused_after
from elastream.runtime.fusion import FusedChain, find_chains, fusable


def chain_of(op: Any) -> FusedChain | None:
    """The fused chain ``op`` runs as one operator: itself, or the chain a replica wraps; else None."""
    if isinstance(op, OrderedReplica):
        op = op.inner
    return op if isinstance(op, FusedChain) else None


def replicated_chains(operators: Iterable[tuple[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Replica name → its chain's member names, for each replica of a fused chain among ``operators``."""
    return {name: chain.names for name, op in operators
            if isinstance(op, OrderedReplica) and (chain := chain_of(op)) is not None}


def unit_chains(operators: Iterable[Any]) -> list[tuple[str, ...]]:
    """The chains fused into one operator before the run (each once, however many replicas it has)."""
    chains = (chain_of(op) for op in operators)
    return list(dict.fromkeys(chain.names for chain in chains if chain is not None))


def part_chains(spec: ChildSpec) -> list[tuple[str, ...]]:
    """The chains the part of ``spec`` fuses when it compiles its operators (as its engine decides it)."""
    if not spec.config.scheduling.fuse or sum(fusable(op, op.spec()) for _, op in spec.operators) < 2:
        return []  # no chain (of two operators or more) to find: the part's flow is not built
    flow = build_child_flow(spec)
    instances = {name: handle.operator for name, handle in flow.operators.items()}
    return find_chains(flow, {name: op.spec() for name, op in instances.items()}, instances, spec.config.threads)


class RunChains:
    """The chains running fused in a run of ``operators`` split into ``specs`` (parts 1.. as they run now).

    Unit chains (fused into one operator before the run) stay as they are; a worker part's chains
    start as it compiled them and follow the ``Fuse`` / ``Unfuse`` it applied (:meth:`regrouped`).
    Part 0's run live in its own engine, which the caller adds.

    Threading: built and updated on the caller's thread (the one that submits decisions).
    """

    def __init__(self, operators: Iterable[Any], specs: Sequence[ChildSpec]):
        self.units = tuple(unit_chains(operators))
        self.parts: dict[int, tuple[tuple[str, ...], ...]] = {
            index: tuple(part_chains(spec)) for index, spec in enumerate(specs) if index > 0}

    def regrouped(self, process: int, decision: Fuse | Unfuse) -> None:
        """Record that worker part ``process`` applied ``decision``."""
        if process in self.parts:
            self.parts[process] = fused_after(self.parts[process], decision)

    def all(self) -> tuple[tuple[str, ...], ...]:
        """Unit chains, then each worker part's (each chain once)."""
        chains = list(self.units)
        for process in sorted(self.parts):
            chains.extend(self.parts[process])
        return tuple(dict.fromkeys(chains))


def part_flows(specs: Sequence[ChildSpec]) -> list[Any]:
    """The flow each part compiles (proxies at its cut edges), by process index: what it may fuse."""
    return [build_child_flow(spec) for spec in specs]


# -- statistics ----------------------------------------------------------------------------------
def with_members(stats: FlowStats, handle: Any, chains: Mapping[str, tuple[str, ...]]) -> FlowStats:
    """``stats`` of a part plus one entry per member of each replicated chain it hosts (its replicas summed).

    ``handle`` is the part's engine handle (``handle.operator(name)``: a replica's run instance).
    """
    members: dict[str, OperatorStats] = {}
    for name in chains:
        whole = stats.operators.get(name)
        chain = chain_of(handle.operator(name)) if whole is not None else None
        if chain is None:
            continue
        bypass = stats.operators.get(name.rpartition("#")[0])  # the chain run unreplicated (runtime.bypass)
        if bypass is not None:  # it shares this replica's chain and counters: its time is the members' too
            whole = replace(whole, busy_s=whole.busy_s + bypass.busy_s, cpu_s=whole.cpu_s + bypass.cpu_s)
        for entry in member_entries(whole, chain):
            known = members.get(entry.name)
            members[entry.name] = entry if known is None else add_operator_stats(known, entry)
    if not members:
        return stats
    return replace(stats, operators={**stats.operators, **members})


def member_entries(whole: OperatorStats, chain: FusedChain) -> list[OperatorStats]:
    """One snapshot per member of the chain a replica runs, from the replica's own (``whole``).

    Tuple counts are each member's (the chain counts them per batch; the replica counts
    pieces). The replica's busy and CPU seconds are shared out by the members' stage
    times, evenly before any was timed. The replica's input is pieces, so every member's
    port is shown as the call it is, having passed that member's tuples.
    """
    names, n = chain.names, len(chain.names)
    tuples_in, tuples_out, stage_s = chain.counters()
    timed = sum(stage_s)
    shares = [s / timed for s in stage_s] if timed > 0 else [1.0 / n] * n
    out = []
    for i, name in enumerate(names):
        first, last = i == 0, i == n - 1
        sent = {dst: tuples_out[i] for dst in whole.sent} if last else {names[i + 1]: tuples_out[i]}
        out.append(replace(
            whole, name=name, busy_s=whole.busy_s * shares[i], cpu_s=whole.cpu_s * shares[i],
            tuples_in=tuples_in[i], tuples_out=tuples_out[i],
            read_rate=_scaled(whole.read_rate, tuples_in[i], whole.tuples_in),
            write_rate=_scaled(whole.write_rate, tuples_out[i], whole.tuples_out),
            read_blocked_s=whole.read_blocked_s if first else 0.0,
            write_blocked_s=whole.write_blocked_s if last else 0.0,
            output_write_blocked_ratio=whole.output_write_blocked_ratio if last else 0.0,
            inputs=(_call_port(whole, name, tuples_in[i]),), malformed=0, sent=sent, key_group_load=()))
    return out


def _scaled(rate: float, tuples: int, pieces: int) -> float:
    """A replica's rate in pieces per second as tuples per second of one member."""
    return rate * tuples / pieces if pieces else 0.0


def _call_port(whole: OperatorStats, name: str, passed: int) -> PortStats:
    """A member's input inside a replica: a call, never holding a tuple."""
    capacity = whole.inputs[0].capacity if whole.inputs else 0
    return PortStats(operator=name, port=0, size=0, capacity=capacity, max_size=0, writes=passed, reads=passed,
                     dropped=0, closed=whole.state == "completed", publishers=1, write_blocked_ratio=0.0,
                     front_wait_s=0.0)


#: Which of two instances' states one entry for both shows: a running instance over a finished one.
_STATE_RANK = {"completed": 0, "ready": 1}


def add_operator_stats(a: OperatorStats, b: OperatorStats) -> OperatorStats:
    """One entry for two instances of one operator (replicas of a member in one part or several): counts,
    times, rates and traffic summed; the state of the one further from its end."""
    state = a.state if _STATE_RANK.get(a.state, 2) >= _STATE_RANK.get(b.state, 2) else b.state
    sent = dict(a.sent)
    for dst, n in b.sent.items():
        sent[dst] = sent.get(dst, 0) + n
    return replace(
        a, state=state, activations=a.activations + b.activations, busy_s=a.busy_s + b.busy_s,
        read_blocked_s=a.read_blocked_s + b.read_blocked_s, write_blocked_s=a.write_blocked_s + b.write_blocked_s,
        tuples_in=a.tuples_in + b.tuples_in, tuples_out=a.tuples_out + b.tuples_out,
        last_scheduled=max(a.last_scheduled, b.last_scheduled), read_rate=a.read_rate + b.read_rate,
        write_rate=a.write_rate + b.write_rate,
        output_write_blocked_ratio=max(a.output_write_blocked_ratio, b.output_write_blocked_ratio),
        inputs=_added_ports(a.inputs, b.inputs), malformed=a.malformed + b.malformed, cpu_s=a.cpu_s + b.cpu_s,
        sent=sent, workers=a.workers + b.workers, peak_workers=a.peak_workers + b.peak_workers)


def _added_ports(a: tuple[PortStats, ...], b: tuple[PortStats, ...]) -> tuple[PortStats, ...]:
    if len(a) != len(b):
        return a
    return tuple(replace(x, size=x.size + y.size, writes=x.writes + y.writes, reads=x.reads + y.reads,
                         dropped=x.dropped + y.dropped, max_size=max(x.max_size, y.max_size),
                         closed=x.closed and y.closed) for x, y in zip(a, b))


def listed_operators(operators: Mapping[str, Any], order: Iterable[str], bypass: Iterable[Any] = ()) -> dict[str, Any]:
    """Every name a run's merged statistics list, in ``order`` (of ``operators``), with its operator.

    A replicated chain's members follow its last replica; a chain run unreplicated as one
    operator is listed as its members instead (its part's snapshot names them, not it). A held
    unit's bypass (:class:`~elastream.runtime.bypass.BypassSpec`) is listed under the unit's name
    just before its split.
    """
    listed: dict[str, Any] = {}
    last_of: dict[tuple[str, ...], str] = {}
    bypass_before = {spec.split: spec for spec in bypass}
    for name in order:
        if name in bypass_before and bypass_before[name].replica in operators:
            listed[bypass_before[name].unit] = operators[bypass_before[name].replica].inner
        chain = chain_of(operators[name])
        if chain is not None and not isinstance(operators[name], OrderedReplica):
            listed.update(zip(chain.names, chain.members))
            continue
        listed[name] = operators[name]
        if chain is not None:
            last_of[chain.names] = name
    if not last_of:
        return listed
    out: dict[str, Any] = {}
    members_after = {name: chain_of(operators[name]) for name in last_of.values()}
    for name, op in listed.items():
        out[name] = op
        chain = members_after.get(name)
        if chain is not None:
            out.update(zip(chain.names, chain.members))
    return out
