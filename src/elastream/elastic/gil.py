"""GIL-awareness for the thread controllers: do more threads buy CPU, or only busy time?

In CPython, threads running pure-Python operators take turns holding the GIL:
a worker waiting for it counts as busy (it is inside an operator) but uses no
CPU. The per-worker statistics measure both, so one period tells the cases apart:

* ``CPU``: busy time is CPU time — threads run in parallel (or one thread is
  enough); the usual rules apply, never above the cores.
* ``GIL_BOUND``: the process is busy on several threads but uses about one
  core in all — the GIL serialises them. More threads only add switching, so
  the level goes *down* to what the CPU actually used, and the CPU has to come
  from processes (or replicas in worker processes) instead.
* ``WAITING``: busy time is mostly off the CPU, the process is far from one
  core and the machine has CPU to spare — operators release the GIL while they
  wait (blocking I/O). Threads above the cores may help there, up to
  ``Machine.thread_cap``, as long as throughput keeps rising.

Threading: pure functions over immutable snapshots.

Example::

    reading = read_gil(period)
    reading.regime is Regime.GIL_BOUND        # 4 busy threads, about one core of CPU
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from elastream.elastic.controller import Machine, threads_everywhere
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels, SetProcesses

#: Busy threads per process above which a process counts as asking for more than one core: a
#: single thread is never GIL-bound, and half a thread of extra busy time is measurement noise.
SEVERAL_THREADS_BUSY = 1.5

#: CPU (cores per process) at or below which a process with several busy threads is serialised by
#: the GIL: one core plus what the runtime's own C code (ring copies, hashing) runs without it.
ONE_CORE = 1.15

#: CPU (cores per process) below which a busy process is not limited by the GIL at all: its threads
#: mostly wait for something else with the GIL released. Between this and ONE_CORE, the reading is
#: ambiguous (a GIL-bound process on an oversubscribed machine also gets less than a core) and
#: counts as CPU, where the usual rules and the throughput trend decide.
OFF_CPU = 0.6

#: Periods a thread level found GIL-bound (or not worth it above the cores) stays the ceiling before
#: the controller may probe above it again: with periods of about half a second, a probe (one step
#: up, one back) costs at most one level change per ten periods in steady state.
HOLD_PERIODS = 20


class Regime(enum.StrEnum):
    """What more threads would buy a process (see the module docstring)."""

    CPU = "cpu"
    GIL_BOUND = "gil_bound"
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class GilReading:
    """One period's busy and CPU time per process, and what they say about threads."""

    busy_threads: float
    """Busy seconds per second per process: how many threads were running operators."""
    cpu_cores: float
    """CPU seconds per second per process: how many cores those threads actually used."""
    regime: Regime

    @property
    def cpu_share(self) -> float:
        """CPU seconds per busy second (1.0 when nothing was busy)."""
        return self.cpu_cores / self.busy_threads if self.busy_threads > 0 else 1.0

    def level_it_supports(self, minimum: int = 1) -> int:
        """The thread level a GIL-bound process can use: the cores its threads actually used."""
        return max(minimum, round(self.cpu_cores))

    def describe(self) -> str:
        """A short human account, for decision reasons."""
        return f"{self.busy_threads:.1f} threads busy on {self.cpu_cores:.2f} cores of CPU"


def read_gil(period: PeriodStats, machine: Machine | None = None) -> GilReading:
    """The period's GIL reading: that of the process whose threads were busiest.

    One process's threads can pile up on the GIL while another's do not: a unit moved whole into a worker
    left process 0 with two threads busy on one core beside a worker with one, and their mean (1.5 threads
    on one core) read as CPU-bound for a whole load phase. So each process is read on its own, and the one
    with the most busy threads speaks for the level.

    Threads busy far off the CPU read as WAITING only on a machine whose CPU was
    measured and has room (``machine``): on a saturated machine, or one not
    measured, a GIL-bound process also gets less than a core, and more threads
    would get no more CPU either way, so they read as GIL_BOUND.

    Example: ``read_gil(period).regime is Regime.CPU`` for one busy thread.
    """
    span = period.period_s
    if span <= 0 or not period.workers:
        return GilReading(0.0, 0.0, Regime.CPU)
    per_process: dict[int, list[float]] = {}
    for w in period.workers:
        totals = per_process.setdefault(w.process, [0.0, 0.0])
        totals[0] += w.busy_s
        totals[1] += w.cpu_s
    busy, cpu = max(per_process.values())
    room = machine is not None and machine.is_cpu_measured() and not machine.is_cpu_busy()
    return GilReading(busy_threads=busy / span, cpu_cores=cpu / span, regime=_regime(busy / span, cpu / span, room))


def _regime(busy_threads: float, cpu_cores: float, cpu_has_room: bool) -> Regime:
    if busy_threads < SEVERAL_THREADS_BUSY or cpu_cores <= 0:
        return Regime.CPU  # one busy thread (or no CPU measured: Spark, an old snapshot) says nothing
    if cpu_cores < OFF_CPU and cpu_cores < 0.5 * busy_threads and cpu_has_room:
        return Regime.WAITING
    if cpu_cores <= ONE_CORE and cpu_cores < busy_threads / SEVERAL_THREADS_BUSY:
        return Regime.GIL_BOUND
    return Regime.CPU


def thread_ceiling(reading: GilReading, machine: Machine) -> int:
    """The most threads per process worth trying: the cores, or the waiting cap for GIL-releasing operators.

    Example: ``thread_ceiling(GilReading(3.0, 0.2, Regime.WAITING), Machine(cores=2)) == 8``
    """
    if reading.regime is Regime.WAITING:
        return machine.thread_cap
    return max(1, machine.cores)


def processes_wanted(reading: GilReading, levels: Levels, machine: Machine) -> int | None:
    """How many processes a GIL-bound flow asks for, or None when more would not help.

    The busy threads show the parallel work waiting for the GIL; each process brings one
    more core's worth, up to the cores and ``machine.process_cap``, while the machine's CPU
    has room.

    Example: ``processes_wanted(GilReading(4.0, 1.0, Regime.GIL_BOUND), Levels(threads=(4,)), Machine(cores=2)) == 2``
    """
    if reading.regime is not Regime.GIL_BOUND or machine.is_cpu_busy():
        return None  # (on a saturated machine another process would get no CPU either)
    cap = min(machine.process_cap, max(1, machine.cores))
    wanted = min(cap, levels.processes * max(1, round(reading.busy_threads)))
    return wanted if wanted > levels.processes else None


class GilGuard:
    """The GIL rules a thread controller applies before its own: step down when GIL-bound, hold a ceiling.

    Holds a learnt ceiling (a level found GIL-bound, or one above the cores that did not pay)
    for HOLD_PERIODS periods, so the controller does not climb straight back into it.
    """

    def __init__(self, min_threads: int = 1, hold_periods: int = HOLD_PERIODS):
        self.min_threads = min_threads
        self.hold_periods = hold_periods
        self.cap: int | None = None
        self._left = 0

    def ceiling(self, reading: GilReading, machine: Machine) -> int:
        """This period's most threads per process: :func:`thread_ceiling`, or less while a cap is held."""
        if self._left > 0:
            self._left -= 1
            if self._left == 0:
                self.cap = None
        ceiling = thread_ceiling(reading, machine)
        return max(self.min_threads, min(ceiling, self.cap)) if self.cap is not None else ceiling

    def hold(self, level: int) -> None:
        """Cap the level at ``level`` for the next HOLD_PERIODS periods."""
        self.cap = max(self.min_threads, level)
        self._left = self.hold_periods

    def forget(self) -> None:
        """Drop the held cap (a change of load: the old evidence no longer holds)."""
        self.cap, self._left = None, 0

    def step_down(self, reading: GilReading, levels: Levels, machine: Machine) -> list[Decision]:
        """When GIL-bound: fewer threads per process (what the CPU used) and, where it helps, more processes.

        Example: 4 threads busy on one core → ``[SetThreads(1, ...), SetProcesses(2, ...)]`` on two cores.
        """
        level = levels.threads[0]
        if reading.regime is not Regime.GIL_BOUND or level <= self.min_threads:
            return []
        target = min(level - 1, reading.level_it_supports(self.min_threads))
        self.hold(target)
        why = (f"{reading.describe()} per process: the GIL runs their Python code one at a time, so more "
               f"threads add busy time but no CPU time; {target} thread(s) per process")
        decisions = threads_everywhere(levels, target, why)
        processes = processes_wanted(reading, levels, machine)
        if processes is not None:
            decisions.append(SetProcesses(processes, reason=f"{reading.describe()} per process: the CPU has to "
                                                            f"come from processes, not threads; {processes} processes"))
        return decisions
