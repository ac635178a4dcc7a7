"""Replica sizing in one step: the DS2 model over bottlenecks found by write-blocked ratio.

DS2 (Kalavri et al., OSDI 2018): an operator's *true processing rate* is the
tuples one instance handles per second of useful time (busy: neither waiting
for input nor back-pressured). The instances it needs are the rate it must
sustain divided by that true rate, and the rates to sustain are computed from
the sources downwards for the whole graph at once (each unit's input is what
its upstream units send it, scaled by their selectivities and edge shares),
so a bottleneck gets the replicas it needs in one step instead of one more
per period (C-Stream §4.2.2).

What the sources must be given: a source that was not back-pressured puts out
all it has, so its observed rate is the load; a back-pressured one could go
faster, up to its own true rate. The whole graph cannot go faster than the
machine's cores allow (the CPU seconds every source tuple costs, over all
units) nor than its units that cannot be replicated, so the targets are scaled
down to the most the graph can sustain.

:class:`DS2Controller` adds replicas when Algorithm 9 finds a bottleneck
(:mod:`elastream.elastic.bottleneck`) — sizing every replicable unit the
targets say is short in the same step — removes replicas a unit no longer
needs (after SHRINK_PERIODS periods in a row say so), and names hot key groups
instead of adding replicas that cannot help; nor does it add any while the
workers already use the cores (:func:`cpu_is_full`), or, every process started, until they have left
CPU to spare for :data:`ROOM_PERIODS` periods in a row. With worker processes held ready
it also sizes by what each process carries (:mod:`elastream.elastic.packing`).

Threading: :func:`ds2_instances` is pure; a controller belongs to one elastic loop.

Example::

    controller = DS2Controller()
    controller.decide(period, Levels(threads=(2,)), Machine(cores=2))   # [SetReplicas("slow", 2, reason=...)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastream.elastic.bottleneck import DRAIN_S, TAU, detect_bottlenecks, is_backlogged, is_starved
from elastream.elastic.controller import Machine, machine_or_here
from elastream.elastic.hotkeys import HOT_SHARE, HotKeyWatch
from elastream.elastic.packing import fits_after, lowers_busiest, spread_decisions
from elastream.elastic.view import FlowView, Unit, flow_view, period_throughput
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels, SetReplicas

#: A unit gets one more instance only for a need above this fraction of one: the rates of one short
#: period are noisy by several percent, and an instance that would be a tenth busy costs more than it gives.
GROW_SLACK = 0.1

#: A unit gives an instance back only when the rest would still have this much spare capacity,
#: so that removing a replica does not make a new bottleneck the next period adds back.
SHRINK_HEADROOM = 1.15

#: ... and only after this many periods in a row found it over-sized: one short period's rates move in
#: whole batches, and giving a replica back on one low reading would only add it again next period.
SHRINK_PERIODS = 3

#: CPU seconds per tuple below which a unit gets no replica in another process: its replicas run in
#: worker processes (elastic.units, elastic.held), and carrying a tuple there and back — the split's
#: routing, the ring's encoding and copy both ways, the merge's ordering — costs a few microseconds of
#: CPU per small tuple; a unit lighter than that would only get slower (the 12 identity maps of
#: ``bench overhead`` cost about 1 µs per tuple in all, the keyed benchmark's function 20 µs).
MIN_REMOTE_COST_S = 5e-6

#: Share of the cores the worker threads' CPU must stay under for a replica to be added: with every process
#: started and its workers using this much, the machine is the bottleneck, and a replica would only move work
#: between full processes and add a split and a merge per batch (IBM Fig. 10 under ``Runner(processes=2)``: two
#: whole chains fill both cores, as a static plan's do, yet each unit's input stays full).
FULL_CPU_SHARE = 1.0 - TAU

#: With every process started, a replica is added only after this many periods in a row with CPU to spare: one
#: period's dip under FULL_CPU_SHARE (a pause of the machine's) spread IBM Fig. 10's whole chains under
#: ``Runner(processes=2)`` with the GIL held in each of 3 runs, a layout that then ran 7-23% slower to the end.
ROOM_PERIODS = 2

#: With every process started, a period whose flow throughput moved more than this from the period before does
#: not count towards ROOM_PERIODS: after a change of load the queues still hold the old load's tuples, and one
#: branch draining them while its sibling runs the new ones dry leaves CPU idle for a second or so (IBM Fig. 10's
#: last phase under ``Runner(processes=2)``: a replica added then for a chain still on 40 µs tuples unbalanced the
#: placed layout, which took 7-14 periods to recover).
SETTLED_CHANGE = 0.2

#: A replica count proposed but not in force yet is not proposed again for this many periods: the run
#: applies it at its next reconfiguration point, or refused it (the timeline says why), and repeating
#: it every period would only fill the timeline.
REPEAT_PERIODS = 4


@dataclass(frozen=True, slots=True)
class Sizing:
    """What DS2 computed for one unit."""

    unit: str
    target_rate: float
    """Tuples per second it must take in."""
    true_rate: float
    """Tuples per busy second of one instance."""
    instances: float
    """Instances needed (fractional: ``target_rate / true_rate``)."""


def source_rate(unit: Unit, period_s: float, tau: float = TAU) -> float:
    """Tuples per second a source must be able to send: observed, or faster when the flow held it back.

    Held back is back-pressured (its output port full for τ of the period or more) or starved (it
    waited for a worker thread busy elsewhere for τ of the period or more: one thread running a source
    beside a slow operator starves the source long before its port fills). Then the rate is what it
    sent per second it could send.

    Example: ``source_rate(src, 0.5)`` is ``src.tuples_out / 0.5`` for a source that never waited.
    """
    if period_s <= 0:
        return 0.0
    if unit.output_congestion < tau and not is_starved(unit, period_s, tau):
        return unit.tuples_out / period_s
    could_send = max(unit.busy_s, period_s - unit.write_blocked_s - unit.starved_s, 1e-9)
    return unit.tuples_out / could_send


def input_targets(view: FlowView, tau: float = TAU) -> dict[str, float]:
    """Tuples per second each unit must take in so the sources can send at their rates (sources downwards),
    plus what waits at its input drained within :data:`~elastream.elastic.bottleneck.DRAIN_S`."""
    inflow: dict[str, float] = {}
    for unit in view.topological():
        if unit.is_source:
            out_rate = source_rate(unit, view.period_s, tau)
        else:
            out_rate = inflow.get(unit.name, 0.0) * unit.selectivity
        sent = sum(unit.downstream.values())
        for dst, n in unit.downstream.items():
            inflow[dst] = inflow.get(dst, 0.0) + (out_rate * n / sent if sent else 0.0)
    for unit in view.units.values():
        # What waits at an input no producer is blocked on (a finite input, buffered) must drain within
        # DRAIN_S too; a congested input's backlog is the sources' rate already, which sets its target.
        if unit.backlog and not unit.is_source and unit.input_congestion < tau:
            inflow[unit.name] = inflow.get(unit.name, 0.0) + unit.backlog / DRAIN_S
    return inflow


def sustainable_scale(view: FlowView, targets: dict[str, float], machine: Machine,
                      max_instances: dict[str, int], tau: float = TAU) -> float:
    """The largest fraction (≤ 1) of the targets the machine's cores and every unit's instance cap allow."""
    scale = 1.0
    cpu_per_second = view.overhead_cpu_s / view.period_s if view.period_s > 0 else 0.0  # splits and merges
    for unit in view.units.values():
        rate = source_rate(unit, view.period_s, tau) if unit.is_source else targets.get(unit.name, 0.0)
        cpu_per_second += rate * unit.cpu_per_tuple_s
    if cpu_per_second > machine.cores:
        scale = machine.cores / cpu_per_second
    for unit in view.units.values():
        need = targets.get(unit.name, 0.0)
        if unit.is_source or need <= 0 or unit.true_rate <= 0:
            continue
        capacity = unit.true_rate * max_instances.get(unit.name, unit.instances)
        scale = min(scale, capacity / need)
    return scale


def ds2_instances(view: FlowView, machine: Machine, max_instances: dict[str, int],
                  tau: float = TAU) -> dict[str, Sizing]:
    """DS2's sizing of every unit that ran this period: target rate, true rate and instances needed.

    ``max_instances`` caps each unit (units not named keep their instances: they cannot be replicated).

    Example: ``ds2_instances(view, Machine(cores=2), {"slow": 2})["slow"].instances``  # about 2.0
    """
    targets = input_targets(view, tau)
    scale = sustainable_scale(view, targets, machine, max_instances, tau)
    sizing = {}
    for unit in view.units.values():
        if unit.is_source or unit.true_rate <= 0:
            continue
        target = targets.get(unit.name, 0.0) * scale
        sizing[unit.name] = Sizing(unit.name, target, unit.true_rate, target / unit.true_rate)
    return sizing


def grown(need: float) -> int:
    """Instances for a need when adding: round up, unless only a sliver of one more is needed."""
    return max(1, math.ceil(need - GROW_SLACK))


def shrunk(need: float) -> int:
    """Instances for a need when removing: keep SHRINK_HEADROOM of spare capacity."""
    return max(1, math.ceil(need * SHRINK_HEADROOM))


class DS2Controller:
    """Replica sizing (C-Stream §4.2 with DS2's one-step sizing); names hot key groups.

    ``tau``: Algorithm 9's congestion threshold; ``max_replicas``: the most replicas per
    unit (None: the cores, or ``Machine.thread_cap`` for operators that wait off the CPU).
    """

    name = "ds2"

    def __init__(self, tau: float = TAU, max_replicas: int | None = None, hot_share: float = HOT_SHARE):
        self.tau = tau
        self.max_replicas = max_replicas
        self.hot_keys = HotKeyWatch(hot_share)
        self._oversized: dict[str, int] = {}
        self._periods = 0
        self._asked: dict[str, tuple[int, int, int]] = {}
        """Unit → (count proposed, its instances then, period of the proposal)."""
        self._room = 0
        """Periods in a row the workers left CPU to spare."""
        self._throughput: float | None = None
        """The flow's throughput the period before."""

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None) -> list[Decision]:
        """Hot key groups newly seen, then replica counts for the units DS2 finds short or over-sized."""
        if period.period_s <= 0:
            return []
        machine = machine_or_here(machine)
        view = flow_view(period, levels)
        named, hot = self.hot_keys.look(view.units.values())
        caps = self.replica_caps(view, machine, hot | set(levels.moved))
        sizing = ds2_instances(view, machine, caps, self.tau)
        bottlenecks = detect_bottlenecks(view, self.tau)
        decisions: list[Decision] = list(named)
        room = self._has_room(period, levels, machine)  # first: it counts the periods with room
        resized = self._grown(view, sizing, levels, caps, bottlenecks) if room else []
        shrinks = shrink_decisions(view, sizing, {b.name for b in bottlenecks})
        resized += self._confirmed([d for d in shrinks if fits_after(period, levels, d, SHRINK_HEADROOM)])
        return decisions + self._not_repeated(resized, view)

    def _grown(self, view: FlowView, sizing: dict[str, Sizing], levels: Levels, caps: dict[str, int],
               bottlenecks: list[Unit]) -> list[SetReplicas]:
        """More replicas for the units DS2 finds short where they lower the busiest process's load
        (:func:`~elastream.elastic.packing.lowers_busiest`), else the held layout's moves and spreads."""
        grows = [d for d in grow_decisions(view, sizing, caps, bottlenecks) if lowers_busiest(view, sizing, levels, d)]
        return grows or spread_decisions(view, sizing, levels, caps, self.tau)

    def _has_room(self, period: PeriodStats, levels: Levels, machine: Machine) -> bool:
        """True when a replica could add CPU: the workers are not full (:func:`cpu_is_full`) and, with
        several processes all started, have not been for :data:`ROOM_PERIODS` settled periods in a row."""
        full = cpu_is_full(period, levels, machine)
        all_started = levels.processes > 1 and levels.working_processes == levels.processes
        settled = self._load_settled(period)
        self._room = self._room + 1 if all_started and not full and settled else 0
        return not full and (not all_started or self._room >= ROOM_PERIODS)

    def _load_settled(self, period: PeriodStats) -> bool:
        """True unless the flow's throughput moved more than :data:`SETTLED_CHANGE` from the period before."""
        now, before = period_throughput(period), self._throughput
        self._throughput = now
        return before is None or before <= 0 or abs(now - before) <= SETTLED_CHANGE * before

    def _not_repeated(self, resized: list[SetReplicas], view: FlowView) -> list[SetReplicas]:
        """``resized`` without the proposals made less than REPEAT_PERIODS ago for a unit that has not changed."""
        self._periods += 1
        fresh = []
        for d in resized:
            instances = view.units[d.operator].instances
            asked = self._asked.get(d.operator)
            if asked is not None and asked[:2] == (d.count, instances) and self._periods - asked[2] < REPEAT_PERIODS:
                continue
            self._asked[d.operator] = (d.count, instances, self._periods)
            fresh.append(d)
        return fresh

    def _confirmed(self, shrinks: list[SetReplicas]) -> list[SetReplicas]:
        """The shrinks proposed SHRINK_PERIODS periods in a row (a unit's count resets when it is not proposed)."""
        proposed = {d.operator for d in shrinks}
        self._oversized = {name: self._oversized.get(name, 0) + 1 for name in proposed}
        confirmed = [d for d in shrinks if self._oversized[d.operator] >= SHRINK_PERIODS]
        for d in confirmed:
            self._oversized.pop(d.operator)
        return confirmed

    def replica_caps(self, view: FlowView, machine: Machine, hot: set[str]) -> dict[str, int]:
        """The most instances of each replicable unit (a unit with a hot key group or in ``hot`` (one moved
        whole: runtime.bypass), or one lighter per tuple than carrying a tuple to another process, keeps
        what it has: :data:`MIN_REMOTE_COST_S`)."""
        caps = {}
        for unit in view.units.values():
            if not unit.is_parallel:
                continue
            # Low CPU per busy second means waiting with the GIL released only on a machine known to have
            # CPU to spare; on a saturated one every thread gets a fraction of a core and looks the same.
            waits = unit.waits_off_cpu and machine.is_cpu_measured() and not machine.is_cpu_busy()
            cap = self.max_replicas or (machine.thread_cap if waits else machine.cores)
            too_light = 0 < unit.cpu_per_tuple_s < MIN_REMOTE_COST_S
            caps[unit.name] = unit.instances if unit.name in hot or too_light else max(cap, unit.instances)
        return caps


def cpu_is_full(period: PeriodStats, levels: Levels, machine: Machine) -> bool:
    """True when every process works and their worker threads used :data:`FULL_CPU_SHARE` of the cores or more,
    over the time they ran: no replica can add CPU (a process held ready still can).

    Over the time they ran, since a run's first period starts before its threads do and a worker
    process's threads start later still: a flow filling both cores from the start must not read as
    half idle then, and a worker not reporting yet is no evidence of room.

    Example: two processes, one thread each, 0.97 s of CPU over a 0.5 s period on 2 cores → True.
    """
    if levels.working_processes < levels.processes or period.period_s <= 0:
        return False
    return period.cpu_s() >= FULL_CPU_SHARE * period.capacity_ran(machine.cores * period.period_s)


def grow_decisions(view: FlowView, sizing: dict[str, Sizing], caps: dict[str, int],
                   bottlenecks: list[Unit]) -> list[SetReplicas]:
    """When Algorithm 9 finds a bottleneck DS2 also finds short: every replicable unit DS2 finds short, in one step."""
    wants = {name: min(caps[name], grown(size.instances)) for name, size in sizing.items() if name in caps}
    confirmed = [b for b in bottlenecks if wants.get(b.name, 0) > b.instances]
    if not confirmed:
        # No bottleneck DS2 itself finds short (e.g. the congested unit is the head of a fused chain the
        # levels do not name, whose members share its busy time): nothing here is sure enough to act on.
        return []
    named = {b.name for b in confirmed}
    first = confirmed[0]
    decisions = []
    for name, want in wants.items():
        unit, size = view.units[name], sizing[name]
        if want <= unit.instances:
            continue
        why = (f"{name!r} is a bottleneck ({_congestion(unit)})" if name in named
               else f"{name!r} is sized in the same step as the bottleneck {first.name!r}")
        decisions.append(SetReplicas(name, want, reason=f"{why}: {_rates(size)}, so {want} replicas (DS2)"))
    return decisions


def shrink_decisions(view: FlowView, sizing: dict[str, Sizing], bottlenecks: set[str]) -> list[SetReplicas]:
    """Replicated units DS2 finds over-sized give replicas back (keeping SHRINK_HEADROOM spare)."""
    decisions = []
    for name, size in sizing.items():
        unit = view.units[name]
        if unit.instances <= 1 or name in bottlenecks:
            continue
        keep = shrunk(size.instances)
        if keep < unit.instances:
            decisions.append(SetReplicas(name, keep, reason=f"{name!r} has more replicas than its load needs: "
                                                            f"{_rates(size)}, so {keep} of {unit.instances} (DS2)"))
    return decisions


def _congestion(unit: Unit) -> str:
    """Why Algorithm 9 (or the backlog rule) calls ``unit`` a bottleneck, in words."""
    if unit.input_congestion < TAU and is_backlogged(unit):
        return (f"{unit.backlog:,} tuples wait at its input, {unit.backlog / unit.true_rate:.1f} s of one "
                f"instance's work")
    if unit.input_congestion < TAU:
        return "its source waited for the thread it kept busy"
    return f"input full {unit.input_congestion:.0%} of the period, output {unit.output_congestion:.0%}"


def _rates(size: Sizing) -> str:
    return (f"it must take {size.target_rate:,.0f} tuples/s and one instance handles {size.true_rate:,.0f} "
            f"per busy second, {size.instances:.2f} instances")
