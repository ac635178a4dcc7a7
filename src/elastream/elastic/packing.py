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
  threads saturated — and process 0 would carry more than its threads, the
  unit with the largest share there gets one more replica, until process 0
  fits or no unit can grow.
* **Move whole** (:func:`whole_moves`, tried first): when moving whole
  stateless units to the held processes balances them within
  :data:`MOVE_IMBALANCE`, those units run there whole instead
  (``SetReplicas(unit, 1, replicas=(p,))``, :mod:`elastream.runtime.bypass`): a
  static plan of whole branches, with no split, merge or piece on the way. A
  replicated layout runs every unit in both processes and all the splits and
  merges in process 0, which cost C-Stream Fig. 11 (six branches) 4-7% against
  the whole-branch plan. One heavy unit cannot be balanced by moving: it is
  replicated, as before.
* **Grow** (:func:`lowers_busiest`): a replica DS2 sizes for a short unit is added only where it lowers
  the busiest process's load, since replica ``r`` shares process ``r`` with whatever runs there whole.
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


def unit_needs(view: FlowView, sizing: dict) -> dict[str, float]:
    """Busy seconds per second each unit needs: DS2's instances at the target rate where it sized the unit,
    else (sources) its measured busy share of the period."""
    needs = {}
    for name, unit in view.units.items():
        size = sizing.get(name)
        needs[name] = size.instances if size is not None else (unit.busy_s / view.period_s if view.period_s else 0.0)
    return needs


#: Moving whole units must leave the busiest process at most this much above the even share of the load
#: (else the units are replicated): process 0 also runs the sources, the sinks and every unit not moved.
MOVE_IMBALANCE = 0.15


def process_loads(view: FlowView, needs: dict[str, float], counts: dict[str, int], processes: int,
                  moved: dict[str, int] | None = None) -> list[float]:
    """Busy seconds per second each process would carry with replica ``counts``: a held unit's need split
    over its replicas (replica ``r`` in process ``r``), a unit that ``moved`` whole in its process, every
    other unit and the splits' and merges' work in process 0.

    Example: two units of need 0.6 each, one of them with 2 replicas, on 2 processes → ``[0.9, 0.3]``
    """
    loads = [0.0] * processes
    loads[0] += view.overhead_cpu_s / view.period_s if view.period_s else 0.0
    for name, need in needs.items():
        if moved and name in moved:
            loads[moved[name]] += need
            continue
        n = min(max(1, counts.get(name, 1)), processes)
        for p in range(n):
            loads[p] += need / n
    return loads


def whole_moves(view: FlowView, needs: dict[str, float], counts: dict[str, int], levels: Levels,
                caps: dict[str, int]) -> list[SetReplicas]:
    """Stateless units to run whole in the held processes, largest need first, each in the least loaded one
    while that stays below process 0; none unless the busiest then carries at most MOVE_IMBALANCE above the
    even share (replica ``p`` of a held unit runs in process ``p``: the move asks for that replica alone)."""
    processes = levels.processes
    if processes < 2:
        return []
    moved = dict(levels.moved)
    loads = process_loads(view, needs, counts, processes, moved)
    chosen: list[tuple[str, int]] = []
    for name in sorted(counts, key=lambda n: -needs[n]):
        target = min(range(1, processes), key=loads.__getitem__)
        unit = view.units[name]
        if counts[name] != 1 or name in moved or unit.kind != "stateless" or caps.get(name, 1) <= target:
            continue
        if loads[target] + needs[name] < loads[0]:
            loads[0] -= needs[name]
            loads[target] += needs[name]
            moved[name] = target
            chosen.append((name, target))
    if not chosen or max(loads) > (1.0 + MOVE_IMBALANCE) * sum(loads) / processes:
        return []
    return [SetReplicas(name, 1, replicas=(p,), reason=(
        f"process 0 would be busy {sum(loads):.2f} s per second at the sources' rate; {name!r} "
        f"({needs[name]:.2f} of it) runs whole in held process {p}, which then carries {loads[p]:.2f} "
        f"against process 0's {loads[0]:.2f}")) for name, p in chosen]


def spread_decisions(view: FlowView, sizing: dict, levels: Levels, caps: dict[str, int],
                     tau: float = TAU) -> list[SetReplicas]:
    """With processes held ready and a starved source: more replicas for the units with the largest share of
    an over-full process 0, until it fits its threads (one decision per unit that grows)."""
    if not levels.held or not any(is_starved(s, view.period_s, tau) for s in view.sources()):
        return []
    needs = unit_needs(view, sizing)
    counts = {name: view.units[name].instances for name in levels.replicas if name in view.units}
    moves = whole_moves(view, needs, counts, levels, caps)
    if moves:
        return moves
    loads = process_loads(view, needs, counts, levels.processes, levels.moved)
    capacity, before = levels.threads[0], loads[0]
    grown: set[str] = set()
    tried: set[str] = set()
    while loads[0] > capacity:
        candidates = [name for name in counts if name not in tried and name not in levels.moved
                      and counts[name] < min(caps.get(name, 1), levels.processes)]
        if not candidates:
            break
        name = max(candidates, key=lambda n: needs[n] / counts[n])
        tried.add(name)
        after = process_loads(view, needs, {**counts, name: counts[name] + 1}, levels.processes, levels.moved)
        if max(after) >= max(loads):
            # The other processes are as busy already (units moved there whole): a replica would only move
            # work between full processes and add a split and a merge (C-Stream Fig. 11, GIL released: one
            # period's dip spread a fourth branch over a worker carrying three, 0.88 of the best static for
            # 11 s until DS2 gave the replica back).
            continue
        counts[name] += 1
        tried.discard(name)
        grown.add(name)
        loads = after
    return [SetReplicas(name, counts[name], reason=(
        f"process 0 would be busy {before:.2f} s per second at the sources' rate, over its {capacity} "
        f"thread{'s' if capacity > 1 else ''}, while {name!r} needs {needs[name]:.2f} instances: "
        f"{counts[name]} replicas, one in each of processes 0-{counts[name] - 1} (held processes)"))
        for name in sorted(grown)]


def lowers_busiest(view: FlowView, sizing: dict, levels: Levels, decision: SetReplicas) -> bool:
    """True when ``decision``'s replica count lowers the busiest process's load (always, without processes held
    ready): replica ``r`` runs in process ``r``, and one landing in a process as busy as the rest only moves work
    between full processes and adds a split and a merge (IBM Fig. 10, GIL released: after a change of load, a
    second replica of the branch left in process 0 went to the worker already running the other branch whole,
    and the run's last phase went on at 0.65 of the best static)."""
    if not levels.held or levels.processes < 2:
        return True
    needs = unit_needs(view, sizing)
    counts = {name: unit.instances for name, unit in view.units.items()}
    before = process_loads(view, needs, counts, levels.processes, levels.moved)
    after = process_loads(view, needs, {**counts, decision.operator: decision.count}, levels.processes,
                          levels.moved)
    return max(after) < max(before)


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
