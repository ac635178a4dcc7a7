"""Spreading a saturated process 0 over held processes, when DS2's per-unit sizing finds no unit short.

DS2 sizes each unit as if every instance had a core of its own. Under held
processes (``Runner()``, :mod:`elastream.elastic.held`) every unit's first
instance shares process 0, and replica ``r`` of every unit runs in process
``r``: six parallel branches each doing a sixth of the work each need a third
of a core by DS2's measure — one instance each — while together they keep
process 0's thread busy and leave the other cores idle. When a source starves
there (:func:`~elastream.elastic.bottleneck.cpu_bottleneck`), the flow needs
``P`` cores (the cores, at most the replica caps); the replicable units, the
busiest first, get ``P`` instances until what stays in process 0 is at most its
``1/P`` share of the work.

Threading: pure functions over immutable views.

Example::

    spread_decisions(flow_view(period, levels), levels, {"b0": 2, "b1": 2}, Machine(cores=2))
"""

from __future__ import annotations

from elastream.elastic.bottleneck import cpu_bottleneck
from elastream.elastic.controller import Machine
from elastream.elastic.view import FlowView, Unit
from elastream.runtime.decisions import Levels, SetReplicas

#: Process 0 may keep this much more than its share of the work before another unit is spread.
SLACK = 0.1


def spread_decisions(view: FlowView, levels: Levels, caps: dict[str, int], machine: Machine) -> list[SetReplicas]:
    """Replica counts that bring process 0 down to its share of a starved flow's work (else none).

    Example: six branches each busy 15% of the period on one saturated thread, cores 2 → each to 2.
    """
    if cpu_bottleneck(view) is None:
        return []
    spreadable = sorted((u for u in view.units.values() if caps.get(u.name, 1) > _instances(u, levels)),
                        key=lambda u: u.busy_s, reverse=True)
    if not spreadable:
        return []
    processes = min(machine.cores, max(caps[u.name] for u in spreadable))
    total = sum(u.busy_s for u in view.units.values())
    share = total / max(1, processes)
    in_process_0 = total
    decisions = []
    for unit in spreadable:
        if in_process_0 <= share * (1 + SLACK):
            break
        count = min(caps[unit.name], processes)
        in_process_0 -= unit.busy_s * (1 - 1 / count)
        decisions.append(SetReplicas(unit.name, count, reason=(
            f"its source waited for the thread {len(spreadable)} replicable units kept busy: process 0 does "
            f"{total / view.period_s:.2f} threads' work where each of {processes} processes should do "
            f"{share / view.period_s:.2f}; {unit.name!r} ({unit.busy_s / total:.0%} of it) to {count} replicas")))
    return decisions


def _instances(unit: Unit, levels: Levels) -> int:
    """The instances ``unit`` runs: what the view counted, or what the levels say was decided."""
    return max(unit.instances, levels.replicas.get(unit.name, 1))
