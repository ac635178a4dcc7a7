"""Replica counts for processes held ready: what each process carries when replica ``r`` of every unit runs in ``r``.

DS2 sizes each unit as if each of its instances had a core of its own. In the
held layout (:mod:`elastream.elastic.held`) they do not: every operator runs
in process 0, and replica ``r`` of *every* replicated unit shares process ``r``.
A flow of many light parallel units (C-Stream Fig. 11: six branches, each a
sixth of the work) then fills process 0 while no unit is short by DS2's measure
— each needs a third of an instance — and no single unit is busy enough to
be the bottleneck. The flow is CPU-bound in one process with a second one idle.

So, with processes held ready, the sizing also counts the load per process
(:func:`process_loads`: each unit's DS2 need split evenly over its replicas,
every other unit in process 0 at its measured load) against its threads:

* **Spread** (:func:`spread_decisions`): while a source starves — process 0's
  threads saturated — and process 0 would carry more than its threads, one
  unit at a time leaves it: it moves whole to the least loaded process, or
  gets one more replica there, whichever leaves the busiest process least
  loaded — until process 0 fits or no step lowers the busiest process's load
  by STEP_GAIN. A unit that fits whole in another process moves whole, as a
  static plan places whole branches: replicated, its tuples would pay the
  split's and the merge's ordering in both processes (C-Stream Fig. 11's six
  branches: three moved whole reached 0.98 of three placed per process,
  against 0.90 for all six replicated over both).
* **Keep** (:func:`fits_after`): a replica is given back only if every process
  still fits, with DS2's shrink headroom, once the replica's measured work
  moves to the replicas that stay (:func:`held_loads`). Without this rule,
  spreading would end the starvation that called for it (the source's
  process is still full, but two processes' threads no longer are), DS2 would
  find every unit over-sized at the rate it now sees, and the counts would flap.

Threading: pure functions over immutable views.

Example::

    spread_decisions(view, sizing, Levels(threads=(1, 1), replicas={"b1": 1, "b2": 1}, held=True), caps)
"""

from __future__ import annotations

from elastream.elastic.bottleneck import TAU, is_starved
from elastream.elastic.view import FlowView
from elastream.metrics.period import PeriodStats
from elastream.ordered.replicate import parse_replica_name
from elastream.runtime.decisions import Levels, SetReplicas

#: A spreading step is taken only when it lowers the busiest process's load by this much (busy seconds per
#: second): the needs of one period are noisy by a few percent, and a step that gains less could be undone
#: by the next period's reading.
STEP_GAIN = 0.05


def unit_needs(view: FlowView, sizing: dict) -> dict[str, float]:
    """Busy seconds per second each unit needs: DS2's instances at the target rate where it sized the unit,
    else (sources) its measured busy share of the period."""
    needs = {}
    for name, unit in view.units.items():
        size = sizing.get(name)
        needs[name] = size.instances if size is not None else (unit.busy_s / view.period_s if view.period_s else 0.0)
    return needs


def process_loads(view: FlowView, needs: dict[str, float], active: dict[str, tuple[int, ...]],
                  processes: int) -> list[float]:
    """Busy seconds per second each process would carry with the ``active`` replicas of each held unit: its
    need split over them (replica ``r`` in process ``r``), every other unit and the splits' and merges'
    work in process 0.

    Example: two units of need 0.6 each, one of them on replicas (0, 1), on 2 processes → ``[0.9, 0.3]``
    """
    loads = [0.0] * processes
    loads[0] += view.overhead_cpu_s / view.period_s if view.period_s else 0.0
    for name, need in needs.items():
        where = [p for p in active.get(name, (0,)) if p < processes] or [0]
        for p in where:
            loads[p] += need / len(where)
    return loads


def spread_decisions(view: FlowView, sizing: dict, levels: Levels, caps: dict[str, int],
                     tau: float = TAU) -> list[SetReplicas]:
    """With processes held ready and a starved source: units leave an over-full process 0, one step at a time
    (a move whole or one more replica, :func:`best_step`), until it fits its threads (one decision per unit
    that changed)."""
    if not levels.held or not any(is_starved(s, view.period_s, tau) for s in view.sources()):
        return []
    needs = unit_needs(view, sizing)
    active = {name: levels.active(name) for name in levels.replicas if name in view.units}
    loads = process_loads(view, needs, active, levels.processes)
    capacity, before = levels.threads[0], loads[0]
    changed: set[str] = set()
    while loads[0] > capacity:
        step = best_step(view, needs, active, caps, loads)
        if step is None:
            break
        name, replicas = step
        active[name] = replicas
        changed.add(name)
        loads = process_loads(view, needs, active, levels.processes)
    why = (f"process 0 would be busy {before:.2f} s per second at the sources' rate, over its {capacity} "
           f"thread{'s' if capacity > 1 else ''}")
    return [_spread(name, active[name], needs[name], why) for name in sorted(changed)]


def lowering_peak(view: FlowView, sizing: dict, levels: Levels, grows: list[SetReplicas]) -> list[SetReplicas]:
    """Of DS2's ``grows``, with processes held ready, those that lower the busiest process's load by STEP_GAIN,
    each judged after the ones kept before it (all of them without processes held ready).

    A held unit's new replica runs in a process that already carries other units: on a saturated machine
    every unit's need is over one instance at the sources' rate, and a replica for the unit left in process
    0 beside one moved whole to process 1 would only move the peak there (IBM Fig. 10's two branches: the
    move was undone within two periods)."""
    if not levels.held:
        return grows
    needs = unit_needs(view, sizing)
    active = {name: levels.active(name) for name in levels.replicas if name in view.units}
    kept = []
    for d in grows:
        before = max(process_loads(view, needs, active, levels.processes))
        after = {**active, d.operator: d.replicas or tuple(range(d.count))}
        if max(process_loads(view, needs, after, levels.processes)) <= before - STEP_GAIN:
            active = after
            kept.append(d)
    return kept


def best_step(view: FlowView, needs: dict[str, float], active: dict[str, tuple[int, ...]], caps: dict[str, int],
              loads: list[float]) -> tuple[str, tuple[int, ...]] | None:
    """The step that leaves the busiest process least loaded, as (unit, its replicas then), when it gains at
    least STEP_GAIN: a unit with work in process 0 moves whole to the least loaded process, or takes one
    more replica. A move wins a tie (no ordering of the unit's tuples over two processes)."""
    processes = len(loads)
    other = min(range(1, processes), key=lambda p: (loads[p], p), default=None)
    best: tuple[float, int, str, tuple[int, ...]] | None = None
    for name, replicas in active.items():
        if 0 not in replicas or caps.get(name, 1) < 2:
            continue
        steps = []
        if replicas == (0,) and other is not None:
            steps.append((0, (other,)))
        if len(replicas) < min(caps[name], processes):
            steps.append((1, tuple(sorted({*replicas, min(set(range(processes)) - set(replicas))}))))
        for rank, after in steps:
            peak = max(process_loads(view, needs, {**active, name: after}, processes))
            if best is None or (peak, rank) < best[:2]:
                best = (peak, rank, name, after)
    if best is None or best[0] > max(loads) - STEP_GAIN:
        return None
    return best[2], best[3]


def _spread(name: str, replicas: tuple[int, ...], need: float, why: str) -> SetReplicas:
    """The decision that gives ``name`` the replicas ``replicas`` (first ones: named only when not)."""
    if replicas == tuple(range(len(replicas))):
        return SetReplicas(name, len(replicas), reason=(
            f"{why}, while {name!r} needs {need:.2f} instances: {len(replicas)} replicas, one in each of "
            f"processes 0-{len(replicas) - 1} (held processes)"))
    where = ", ".join(map(str, replicas))
    return SetReplicas(name, len(replicas), replicas=replicas, reason=(
        f"{why}, while {name!r} needs {need:.2f} instances: it runs whole in process {where} (held processes)"
        if len(replicas) == 1 else f"{why}, while {name!r} needs {need:.2f} instances: replicas in processes "
        f"{where} (held processes)"))


def held_loads(period: PeriodStats, processes: int) -> tuple[list[float], dict[str, list[float]]]:
    """Measured busy seconds per second of each held process (replica ``r`` of a unit in process ``r``,
    every other task — splits, merges, ring ends, bypasses — in process 0), and of each unit's replicas."""
    span = period.period_s if period.period_s > 0 else 1.0
    loads = [0.0] * processes
    replicas: dict[str, list[float]] = {}
    for name, op in period.operators.items():
        parsed = parse_replica_name(name)
        where = parsed[1] if parsed is not None and parsed[1] < processes else 0
        loads[where] += op.busy_s / span
        if parsed is not None:
            replicas.setdefault(parsed[0], [0.0] * processes)[where] += op.busy_s / span
    return loads, replicas


def fits_after(period: PeriodStats, levels: Levels, decision: SetReplicas, headroom: float) -> bool:
    """True when every held process still fits its threads, with ``headroom`` to spare, once ``decision``
    gives replicas back and their measured work moves to the replicas that stay (always True without
    processes held ready). A full process 0 takes nothing back: the spread is what keeps it from starving."""
    if not levels.held:
        return True
    loads, replicas = held_loads(period, levels.processes)
    mine = replicas.get(decision.operator, [0.0] * levels.processes)
    keep = max(1, decision.count)
    moved = sum(mine[keep:])
    for p in range(levels.processes):
        loads[p] += moved / keep if p < keep else -mine[p]
    return all(load * headroom <= threads for load, threads in zip(loads, levels.threads))
