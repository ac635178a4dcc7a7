"""Worker processes held ready: how plain ``Runner()`` gets more cores while a flow runs.

Python operators that hold the GIL get more CPU only from more processes
(:mod:`elastream.elastic.gil`), and a running flow cannot move an operator into
a process that does not exist. So an elastic run whose process count the user
left free starts, beside its own process, one worker process per further
core, and holds there one replica of every replication unit
(:func:`~elastream.elastic.units.replication_units`: fused chains, stateless
and partitioned operators) — *held ready*: only the replica in this process
takes work at first. Every other operator runs in this process, so a light
load pays no hop between processes, and until a unit first spreads it runs
*bypassed* (:mod:`elastream.runtime.bypass`): one task from its producer to its
consumer, as a one-process run would, its split and merge idle. When DS2 finds a unit short of capacity it asks for more replicas
(``SetReplicas``) and the unit's split routes batches, or moves key groups
with their state, to the held ones; when the load falls it hands them back.

Processes are held only when they can be started safely and usefully:
several cores, a main script that worker processes may re-import (else the
run stays in one process and says once how to allow processes), operators
that can be pickled to a worker, and at least one unit to replicate.

Threading: pure functions of the flow and the config, on the thread that starts the run.

Example::

    plan = held_plan(flow, config, Elastic())
    plan.config.active_replicas     # {'parse+score': (0,), 'count': (0,)}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import cloudpickle

from elastream.elastic.config import Elastic
from elastream.elastic.controller import available_cores
from elastream.elastic.units import CHAIN_JOIN, replication_units
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.ordered.replicate import merge_name, parse_replica_name, replica_name, split_name
from elastream.runtime.bypass import BypassSpec
from elastream.runtime.config import RunConfig


@dataclass(frozen=True, slots=True)
class HeldPlan:
    """A run whose units hold replicas ready: the flow to run, its config, and the replicas taking work."""

    flow: Flow
    config: RunConfig
    replicas: dict[str, int]
    """Replicas taking work per unit at the start (the elastic loop's ``Levels.replicas``)."""


def held_processes(elastic: Elastic, cores: int | None = None) -> int:
    """Processes an elastic run may hold: the cores, at most ``max_processes``."""
    cores = available_cores() if cores is None else cores
    return max(1, min(cores, elastic.max_processes or cores))


#: Most replication units a run holds replicas of. Each unit holds a split, a merge and a replica per process
#: (and their rings): IBM's 1,000-wide graph made some 5,000 operators that took 19 s to start and then did not
#: flow within 12 s, for branches that each carry a thousandth of the load. Wider flows run in one process.
MAX_HELD_UNITS = 32


def held_plan(flow: Flow, config: RunConfig, elastic: Elastic, cores: int | None = None) -> HeldPlan | None:
    """The held-ready run of ``flow`` (None when it would gain nothing: one core, no unit to replicate, or more
    than :data:`MAX_HELD_UNITS` units).

    The caller has checked that processes are free to choose and that workers may re-import the
    main script. Every operator stays in this process (placement 0); replica ``r`` of each unit
    runs in process ``r``, and only replica 0 takes work.
    """
    processes = held_processes(elastic, cores)
    if processes < 2:
        return None
    unit_flow, counts = replication_units(flow, processes)
    if len(counts) > MAX_HELD_UNITS:
        return None
    counts = {name: count for name, count in counts.items() if _picklable(unit_flow, name)}
    if not counts:
        return None
    placement = {name: 0 for name in unit_flow.operators}
    return _bypassed_plan(unit_flow, dataclasses.replace(config, processes=processes), counts, placement)


def placed_plan(flow: Flow, config: RunConfig) -> HeldPlan | None:
    """``Runner(processes=P)``: the replication units, and where they start (None when no unit can be replicated).

    With at least ``P`` units, a static plan of whole units can give every process work: each unit
    starts where the placement planner (``"auto"``) puts it, unreplicated until DS2 spreads it. Its
    split, replica 0 and merge run there together, so the unit runs through its bypass as that
    static run's operator would, with no split, merge or extra hop between processes; its replica
    ``r`` waits in process ``(home + r) % P``. With fewer units only replicas can use every process:
    each unit starts with one replica working in every process. Every process starts with the run.
    """
    from elastream.placement.choose import resolve_assignment

    unit_flow, counts = replication_units(flow, config.processes)
    if not counts:
        return None
    if len(counts) < config.processes:
        return HeldPlan(unit_flow, dataclasses.replace(config, replicas=counts), counts)
    placement = resolve_assignment("auto", unit_flow, config.processes)
    for name in counts:
        placement[split_name(name)] = placement[merge_name(name)] = placement[name]
    return _bypassed_plan(unit_flow, config, counts, placement)


def _bypassed_plan(unit_flow: Flow, config: RunConfig, counts: dict[str, int], placement: dict[str, int]) -> HeldPlan:
    """The run of ``unit_flow`` with ``counts`` replicas per unit, only replica 0 taking work, through a bypass."""
    bypass = tuple(BypassSpec(name, split_name(name), replica_name(name, 0), merge_name(name)) for name in counts)
    held = dataclasses.replace(config, replicas=counts, placement=placement,
                               active_replicas={name: (0,) for name in counts}, bypass=bypass)
    return HeldPlan(unit_flow, held, {name: 1 for name in counts})


def _picklable(flow: Flow, name: str) -> bool:
    """True when unit ``name`` can be sent to a worker process (else it is not held there: a run that
    works in one process must never fail for want of processes it did not ask for)."""
    try:
        cloudpickle.dumps(flow[name].operator)
    except Exception:  # noqa: BLE001 - pickling raises many kinds
        return False
    return True


def as_written(stats: FlowStats, units: Collection[str], operators: Collection[str],
               moved: Mapping[str, int] | None = None) -> FlowStats:
    """``stats`` as the user's flow names its operators: each replicated unit's replicas summed under its name.

    ``units`` are the replicated units, ``operators`` the names in the user's flow. A unit that is an
    operator of the flow (``"count"``) is listed once, its replicas' counters added up; a fused
    chain's replicas (``"a+b+c#0"``) are left out once its members are listed on their own. The
    splits and merges stay: they are work the run did. The elastic loop reads the raw snapshot.
    ``moved``: the units running whole in another process since (unit → its replica there).
    """
    out: dict[str, OperatorStats] = {}
    for name, op in stats.operators.items():
        parsed = parse_replica_name(name)
        unit = parsed[0] if parsed is not None else name  # a unit's own name: its bypass (runtime.bypass)
        if unit not in units:
            out[name] = op
        elif unit in operators:
            out[unit] = op if unit not in out else _added(out[unit], op)
        elif not all(member in stats.operators for member in unit.split(CHAIN_JOIN)):
            out[name] = op
    for unit in (u for u in units if u in out and u in operators):
        out[unit] = _tuples_as_written(out[unit], stats, unit, (moved or {}).get(unit))
    return dataclasses.replace(stats, operators=out)


def _tuples_as_written(op: OperatorStats, stats: FlowStats, unit: str, moved: int | None = None) -> OperatorStats:
    """``op`` counting the unit's tuples as the user's operator would: what its bypass handled while
    it ran unreplicated, plus what its split took in and its merge gave out (a replica counts the
    pieces it was sent), plus, after it moved whole, what its replica ``moved`` handled (less the one
    message that turned it into the operator: :mod:`elastream.runtime.bypass`)."""
    split, merge = stats.operators.get(split_name(unit)), stats.operators.get(merge_name(unit))
    if split is None or merge is None:
        return op
    bypass = stats.operators.get(unit)
    before_in, before_out = (bypass.tuples_in, bypass.tuples_out) if bypass is not None else (0, 0)
    whole = stats.operators.get(replica_name(unit, moved)) if moved is not None else None
    if whole is not None:
        before_in, before_out = before_in + max(0, whole.tuples_in - 1), before_out + whole.tuples_out
    return dataclasses.replace(op, tuples_in=before_in + split.tuples_in, tuples_out=before_out + merge.tuples_out)


def _added(a: OperatorStats, b: OperatorStats) -> OperatorStats:
    """Two replicas' counters as one operator's (rates and times add up; the busier state shows)."""
    summed = {f: getattr(a, f) + getattr(b, f) for f in _SUMMED}
    state = a.state if a.state == "running" or b.state != "running" else b.state
    return dataclasses.replace(a, state=state, last_scheduled=max(a.last_scheduled, b.last_scheduled),
                               inputs=(), sent={k: a.sent.get(k, 0) + b.sent.get(k, 0) for k in {*a.sent, *b.sent}},
                               output_write_blocked_ratio=max(a.output_write_blocked_ratio,
                                                              b.output_write_blocked_ratio), **summed)


_SUMMED = ("activations", "busy_s", "read_blocked_s", "write_blocked_s", "tuples_in", "tuples_out", "read_rate",
           "write_rate", "malformed", "cpu_s")
