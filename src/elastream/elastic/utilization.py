"""The utilisation thread controller (C-Stream §4.1), GIL-aware.

Each period, the average utilisation U of the worker threads (the fraction of
the period they spent running operators) moves the thread level by one: up
when U > U_h, down when U < U_l, unchanged in between. Around that rule:

* GIL-aware (:mod:`elastream.elastic.gil`): when several threads are busy on
  about one core, the level goes down to what the CPU used and the controller
  proposes processes instead;
* never above the cores, except for operators that release the GIL while they
  wait, up to ``Machine.thread_cap`` — and above the cores only while each
  step up still raised throughput by SENS;
* no step up while the machine's CPU is above 80% (IBM §4.2.3's guard, which
  the paper's controller lacks: a busy host gains nothing from more threads).

Every process runs the same thread level: U is taken over all of the flow's
worker threads (the statistics merge every process's workers).

Threading: one instance per elastic loop, called from its thread.

Example::

    controller = UtilizationController(low=0.90, high=0.95)
    controller.decide(period, Levels(threads=(1,)), Machine(cores=2))   # [SetThreads(2, reason=...)] when U > 0.95
"""

from __future__ import annotations

from elastream.elastic.controller import Machine, machine_or_here, threads_everywhere
from elastream.elastic.gil import GilGuard, read_gil
from elastream.elastic.room import room_ceiling
from elastream.elastic.trend import SENS
from elastream.elastic.view import period_throughput
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels

#: C-Stream §5.2's thresholds (U_l = 0.90, U_h = 0.95): a thread is added only when the threads are
#: nearly always busy, and taken away as soon as a tenth of their time is idle.
LOW = 0.90
HIGH = 0.95


def mean_utilisation(period: PeriodStats, levels: Levels) -> float:
    """Busy seconds of every worker over the period, per thread of the levels (C-Stream §4.1's U).

    Divided by the threads the levels ask for, not by the workers listed: a worker that
    retired during the run is still listed, idle, and must not pull U down.

    Example: two threads busy 0.5 s and 0.3 s of a 1 s period → 0.4
    """
    threads = sum(levels.threads)
    if period.period_s <= 0 or threads <= 0:
        return 0.0
    return min(1.0, period.busy_s() / (threads * period.period_s))


class UtilizationController:
    """C-Stream §4.1: ±1 thread per period by average utilisation against U_l and U_h."""

    name = "utilization"

    def __init__(self, low: float = LOW, high: float = HIGH, min_threads: int = 1, sens: float = SENS):
        if not 0 <= low < high <= 1:
            raise ValueError(f"utilization thresholds need 0 <= low < high <= 1, got low={low}, high={high}")
        self.low, self.high, self.sens = low, high, sens
        self.min_threads = min_threads
        self.gil = GilGuard(min_threads)
        self._throughput: dict[int, float] = {}

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None) -> list[Decision]:
        """The thread level for the next period, for every process."""
        if period.period_s <= 0 or not levels.threads:
            return []
        machine = machine_or_here(machine)
        level = levels.threads[0]
        reading = read_gil(period, machine)
        ceiling = self.gil.ceiling(reading, machine)
        ceiling = room_ceiling(ceiling, level, period, levels)  # one serial unit doing most of the work
        stepped = self.gil.step_down(reading, levels, machine)
        if stepped:
            return stepped
        self._throughput[level] = period_throughput(period)
        if level > ceiling:
            return threads_everywhere(levels, ceiling, f"{level} threads per process is above the {ceiling} "
                                                       f"worth running ({reading.describe()})")
        target, why = self.next_level(mean_utilisation(period, levels), level, ceiling, machine)
        return threads_everywhere(levels, target, why) if target != level else []

    def next_level(self, u: float, level: int, ceiling: int, machine: Machine) -> tuple[int, str]:
        """§4.1's rule: the level after a period of mean utilisation ``u``, and why."""
        if u > self.high and level < ceiling:
            if machine.is_cpu_busy():
                return level, "machine CPU above 80%"
            if level >= machine.cores and not self._rose(level):
                self.gil.hold(level - 1)
                return level - 1, (f"{level} threads (above the {machine.cores} cores) did not raise throughput "
                                   f"by {self.sens:.0%}: back to {level - 1}")
            return level + 1, f"mean utilisation {u:.0%} above U_h {self.high:.0%}: one thread more (C-Stream §4.1)"
        if u < self.low and level > self.min_threads:
            return level - 1, f"mean utilisation {u:.0%} below U_l {self.low:.0%}: one thread less (C-Stream §4.1)"
        return level, "within U_l and U_h"

    def _rose(self, level: int) -> bool:
        """True when ``level`` threads gave SENS more throughput than one thread fewer (or that is unknown)."""
        below = self._throughput.get(level - 1)
        return below is None or self._throughput.get(level, 0.0) > below * (1 + self.sens)
