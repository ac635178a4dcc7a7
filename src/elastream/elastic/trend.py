"""The trend thread controller (IBM Streams §4.2): find the thread level at the peak of the throughput curve.

A :class:`ThreadRecord` per thread level remembers the throughput last seen
there and whether it is trusted. Each period (Fig. 7's ``updateThreadLevel``):

1. if the load changed, no record is trusted any more, and the window that showed it
   (holding the old load's tuples too) is not recorded: the level is measured again;
2. the throughput is recorded at the current level (measured over a window of
   one or more periods at that level, so that a slow flow's batch-sized
   counts do not pass for trends);
3. the level goes up when the level below shows an upward trend and nothing
   above is trusted, when the level above is trusted and better, or when at
   the minimum level with nothing trusted above; it goes down when nothing
   below is trusted or there is no upward trend from below; else it stays.

A trend is a difference of more than SENS (5%). The level never goes above
the cores (except for operators that release the GIL while they wait, up to
``Machine.thread_cap``), never up while the machine's CPU is above 80%, never
below ``min_threads`` (IBM's minimum level; operators here suspend instead of
blocking a thread, so one thread cannot deadlock a flow and the default is 1).
GIL-aware (:mod:`elastream.elastic.gil`): several threads busy on one core
send the level down at once, and processes are proposed instead. Nor does it
explore above the threads the work could keep busy at once
(:mod:`elastream.elastic.room`: one serial unit doing most of the work).

The thread level is the same in every process: the throughput followed is the whole flow's.

Threading: one instance per elastic loop, called from its thread.

Example::

    controller = TrendController()
    controller.decide(period, Levels(threads=(1,)), Machine(cores=4))   # level 1, nothing trusted above: up
"""

from __future__ import annotations

from dataclasses import dataclass

from elastream.elastic.controller import Machine, machine_or_here, threads_everywhere
from elastream.elastic.gil import GilGuard, read_gil
from elastream.elastic.room import room_ceiling
from elastream.elastic.view import period_throughput
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels

#: IBM §4.2.2: differences of more than 5% count as a trend.
SENS = 0.05

#: A change of load is taken when a level's throughput moves this far from the first trusted one there.
#: IBM uses SENS (5%) with 10 s periods on a dedicated host; periods here are about half a second on
#: machines shared with other work, where one period's throughput wanders by more than 5% with no
#: change of load, and untrusting everything on such noise would keep the controller exploring.
LOAD_CHANGE = 0.2

#: A throughput measurement closes once it holds this many tuples (handled, summed over operators)...
#: Counts move in whole batches (up to a few hundred tuples each), so a period of a slow flow holding
#: a few batches swings by far more than SENS from one period to the next with nothing changed.
WINDOW_TUPLES = 5000

#: ... or once it spans this many periods, so that a slow flow is still measured every few periods.
WINDOW_PERIODS = 4


#: A process whose threads were busy less than this share of the period (per thread: not saturated) gets no more
#: threads: a light load would gain nothing from another thread, and on pure-Python operators it
#: would pay the GIL's handovers (5 ms switch interval) in its latency. IBM's minimum-level rule
#: explores upward from any load; here it explores only when the threads are mostly busy.
UNDERUSED = 0.8


def is_start_up(period: PeriodStats) -> bool:
    """True for a run's first period (its workers' running time known): its threads start during it, a worker
    process's later still, and its queues fill from empty, so its throughput is no thread level's. Recorded as
    level 1's, it read 15% below level 2's on C-Stream Fig. 10 under ``Runner(processes=2)``, where the two do
    the same, and held level 2 as "the peak" until one period's noise untrusted it 13 periods on."""
    return period.start_s <= 0 and period.alive_s() is not None


@dataclass(slots=True)
class ThroughputWindow:
    """Consecutive periods at one thread level, measured as one: the trend rules read whole windows."""

    level: int = 0
    tuples: float = 0.0
    seconds: float = 0.0
    periods: int = 0

    def add(self, level: int, tuples: float, seconds: float) -> float | None:
        """Add a period at ``level``; the window's throughput once it closes, else None."""
        if level != self.level:
            self.reset(level)
        self.tuples += tuples
        self.seconds += seconds
        self.periods += 1
        if self.tuples < WINDOW_TUPLES and self.periods < WINDOW_PERIODS:
            return None
        thput = self.tuples / self.seconds if self.seconds > 0 else 0.0
        self.reset(level)
        return thput

    def reset(self, level: int = 0) -> None:
        """Start an empty window at ``level``."""
        self.level, self.tuples, self.seconds, self.periods = level, 0.0, 0.0, 0


@dataclass(slots=True)
class ThreadRecord:
    """What was last seen at one thread level (IBM Fig. 6)."""

    last_time: int = -1
    first_thput: float = 0.0
    """The first throughput trusted at this level (what a change of load is measured against)."""
    last_thput: float = 0.0
    trusted: bool = False


class TrendController:
    """IBM §4.2's elastic thread level: trust and trend rules over a ThreadRecord per level."""

    name = "trend"

    def __init__(self, sens: float = SENS, load_change: float = LOAD_CHANGE, min_threads: int = 1):
        self.sens = sens
        self.load_change = load_change
        self.min_threads = min_threads
        self.records: dict[int, ThreadRecord] = {}
        self.time = 0
        self.gil = GilGuard(min_threads)
        self.window = ThroughputWindow()
        self._context: tuple | None = None
        self._last: tuple[int, float] | None = None
        """The level and throughput of the last window recorded (what the next level is first compared with)."""

    # -- the controller ------------------------------------------------------------------------------
    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None) -> list[Decision]:
        """The thread level for the next period, for every process."""
        if period.period_s <= 0 or not levels.threads:
            return []
        machine = machine_or_here(machine)
        level = levels.threads[0]
        reading = read_gil(period, machine)
        ceiling = self.gil.ceiling(reading, machine)
        if reading.busy_threads < UNDERUSED * level:
            ceiling = min(ceiling, level)  # its threads idle most of the time: one more would only wait too
        ceiling = room_ceiling(ceiling, level, period, levels)  # one serial unit doing most of the work
        untrusted = self._note_context(levels)
        stepped = self.gil.step_down(reading, levels, machine)
        if stepped or level > ceiling:
            self.window.reset()
            return stepped or threads_everywhere(levels, ceiling, f"{level} threads per process is above the "
                                                                  f"{ceiling} worth running ({reading.describe()})")
        if is_start_up(period):
            return []  # no level's throughput: see is_start_up
        thput = self.window.add(level, period_throughput(period) * period.period_s, period.period_s)
        if thput is None:
            return []  # still measuring this level
        target, why = self.update_thread_level(level, thput, ceiling, cpu_ok=not machine.is_cpu_busy())
        if untrusted:
            why = f"{untrusted}; {why}"
        return threads_everywhere(levels, target, why) if target != level else []

    # -- IBM Fig. 7 ----------------------------------------------------------------------------------
    def update_thread_level(self, level: int, thput: float, ceiling: int, cpu_ok: bool = True) -> tuple[int, str]:
        """One period at ``level`` with throughput ``thput``: the next level and the rule that chose it."""
        if self.change_in_load(level, thput):
            # The window that shows the change holds the old load's queued tuples too: its throughput is
            # neither load's. Recorded as this level's, every level explored next beat it (IBM Fig. 10, GIL
            # released: plain Runner() went to 2 threads at the last change and stayed, 0.87 of 1 thread's).
            self.untrust_all()
            self.gil.forget()
            return level, f"load changed, nothing trusted: measuring {level} thread(s) again (IBM §4.2)"
        self.observe(level, thput)
        below, above = self.trend_below(level, thput), self.trend_above(level, thput, ceiling)
        trust_above, trust_below = self.trust_above(level, ceiling), self.trust_below(level)
        wants_up = (below and not trust_above) or above or (level == self.min_threads and not trust_above)
        if wants_up and cpu_ok:  # Fig. 7: a refused increase falls through to the decrease test
            if level < ceiling:
                return level + 1, self._why_up(level, thput, below, above)
            return level, f"at the most threads worth running ({ceiling})"
        busy = "the machine's CPU is above 80%; " if wants_up else ""
        if not trust_below or not below:
            target = max(self.min_threads, level - 1)
            why = ("nothing trusted below this level" if not trust_below
                   else f"no upward trend ({self.sens:.0%}) from level {level - 1}")
            return target, busy + f"{why}: down to {target} thread(s) (IBM §4.2)"
        return level, busy + "at the peak: better than below, nothing better above"

    def observe(self, level: int, thput: float) -> None:
        """Record the period's throughput at ``level`` (trusting it; the first trusted value stays)."""
        rec = self.records.setdefault(level, ThreadRecord())
        rec.last_time = self.time
        self.time += 1
        rec.last_thput = thput
        self._last = (level, thput)
        if not rec.trusted:
            rec.first_thput = thput
        rec.trusted = True

    def change_in_load(self, level: int, thput: float) -> bool:
        """True when the throughput at ``level`` moved more than LOAD_CHANGE from the first trusted there, or, at a
        level with no trusted record, further from the level just left than its threads can (:meth:`beyond_a_step`)."""
        rec = self.records.get(level)
        if rec is None or not rec.trusted or rec.first_thput <= 0:
            return self.beyond_a_step(level, thput)
        return abs(thput - rec.first_thput) > self.load_change * rec.first_thput

    def beyond_a_step(self, level: int, thput: float) -> bool:
        """True when ``thput`` differs from the window just recorded at another level by more than the change
        of threads explains: ``n`` threads do at most ``n / m`` times the work of ``m`` (more, at a higher level;
        less, at a lower one), give or take LOAD_CHANGE.

        Why: IBM's rule compares a level only with its own past, so a load that changes while the controller
        tries a level it has no record of goes unseen, and the level it left keeps its old load's record. On IBM
        Fig. 10 with the GIL released, a step up to 2 threads as the cost per tuple fell 8-fold read 7 times
        level 1's throughput as the second thread's doing: 2 threads held for 10 periods, below 1 thread's.
        """
        if self._last is None or self._last[0] == level or self._last[1] <= 0:
            return False
        was, before = self._last
        if level > was:
            return thput > before * level / was * (1 + self.load_change)
        return thput < before * level / was * (1 - self.load_change)

    def untrust_all(self) -> None:
        """Trust no record (step 1 of Fig. 7 on a change of load), nor the last window as a level's."""
        for rec in self.records.values():
            rec.trusted = False
        self._last = None

    def trend_below(self, level: int, thput: float) -> bool:
        """Throughput here beats the trusted level below by more than SENS."""
        rec = self.records.get(level - 1)
        if level <= self.min_threads or rec is None or not rec.trusted:
            return False
        return thput > rec.last_thput and thput - rec.last_thput > self.sens * rec.last_thput

    def trend_above(self, level: int, thput: float, ceiling: int) -> bool:
        """The trusted level above beats this one by more than SENS."""
        rec = self.records.get(level + 1)
        if level >= ceiling or rec is None or not rec.trusted:
            return False
        return rec.last_thput > thput and rec.last_thput - thput > self.sens * thput

    def trust_below(self, level: int) -> bool:
        """The level below exists and its record is trusted."""
        rec = self.records.get(level - 1)
        return level > self.min_threads and rec is not None and rec.trusted

    def trust_above(self, level: int, ceiling: int) -> bool:
        """The level above is within the ceiling and its record is trusted."""
        rec = self.records.get(level + 1)
        return level < ceiling and rec is not None and rec.trusted

    # -- helpers -------------------------------------------------------------------------------------
    def _note_context(self, levels: Levels) -> str:
        """Untrust every record when the rest of the levels changed (processes, replicas, fusion, a unit moved
        whole into another process): a new curve. A move keeps the unit's replica count (one), so without
        ``moved`` here the throughput it brought read as the thread level's doing."""
        context = (levels.working_processes, tuple(sorted(levels.replicas.items())), levels.fused,
                   tuple(sorted(levels.moved.items())))
        previous, self._context = self._context, context
        if previous is None or previous == context:
            return ""
        self.untrust_all()
        self.window.reset()
        return "processes, replicas or fusion changed, nothing trusted"

    def _why_up(self, level: int, thput: float, below: bool, above: bool) -> str:
        if above:
            return f"level {level + 1} did better than {thput:,.0f} tuples/s: up to {level + 1} (IBM §4.2)"
        if below:
            return (f"{thput:,.0f} tuples/s is more than {self.sens:.0%} above level {level - 1}, nothing trusted "
                    f"above: up to {level + 1} (IBM §4.2)")
        return f"at the lowest level with nothing trusted above: up to {level + 1} (IBM §4.2)"
