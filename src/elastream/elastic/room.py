"""How many threads a process's work could keep busy at once: the Amdahl bound of one period.

A worker thread runs one task at a time, and most tasks take one worker at a
time: a source, a coroutine operator, a held unit running unreplicated, a
replica. Only a stateless or partitioned unit in a one-process run can take
several workers at once (ordered-multicore §2.2, dynamic allotment). So when
one such serial unit carries most of the period's busy time, a second thread
can run only the rest beside it: the flow goes at most ``busy / serial`` times
faster, whatever the GIL does. A 12-map fused chain doing 90% of the work
gains at most 11% from any number of threads, less than a probe of a level
above costs a pure-Python flow (the GIL's handovers).

The thread controllers (IBM §4.2's trend, C-Stream §4.1's utilization) read
this as a ceiling on exploring upwards. It never forces a level down: a level
already above it was chosen on measured throughput.

Threading: pure functions over immutable snapshots.

Example::

    threads_worth(period, Levels(fused=(("m0", "m1"),)))   # 1 when the fused chain does ~90% of the work
"""

from __future__ import annotations

import math

from elastream.elastic.view import Unit, flow_view
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Levels

#: Work outside the largest serial unit, in units of it, that one more thread must have to be worth a
#: probe: the gain must be well above the trend rule's 5% and the noise of one period's measurement.
HALF = 0.5


def threads_worth(period: PeriodStats, levels: Levels) -> int | None:
    """The most threads the period's work could keep busy at once, or None when nothing bounds it.

    None when no unit is serial (every busy unit could take several workers) or nothing was busy.

    Example: a source busy 0.05 s, a serial fused chain 0.45 s and a sink 0.02 s → ``1`` (0.52 / 0.45 = 1.16).
    """
    units = flow_view(period, levels).units.values()
    total = sum(u.busy_s for u in units)
    serial = max((_per_instance_busy(u) for u in units if _is_serial(u, levels)), default=0.0)
    if total <= 0 or serial <= 0:
        return None
    return max(1, math.floor(total / serial + HALF))


def room_ceiling(ceiling: int, level: int, period: PeriodStats, levels: Levels) -> int:
    """``ceiling`` lowered to what the work could keep busy, never below the current ``level``.

    Example: ``room_ceiling(2, 1, period, levels) == 1`` when one serial unit does ~90% of the work.
    """
    worth = threads_worth(period, levels)
    return ceiling if worth is None else min(ceiling, max(level, worth))


def _is_serial(unit: Unit, levels: Levels) -> bool:
    """True when one worker at a time runs each instance of ``unit``, at every thread level.

    A held unit (``Runner()``'s processes) runs as one task in process 0 until replicas in other
    processes join, and a replicated unit's replicas are one task each: threads cannot share them.
    """
    if levels.held or unit.name in levels.replicas:
        return True
    return not unit.is_parallel


def _per_instance_busy(unit: Unit) -> float:
    return unit.busy_s / max(1, unit.instances)
