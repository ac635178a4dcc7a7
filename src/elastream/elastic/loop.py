"""The elastic loop: once a period, read the run's statistics, ask the controllers, apply what they decide.

This is the one place where elasticity meets a running flow, and it meets it
only through the :class:`~elastream.runtime.handle.RunHandle` protocol: it reads
``handle.stats()`` (the period is the difference of two snapshots, DS2's true
rates included) and hands the controllers' decisions to ``handle.submit``,
which applies them at the backend's reconfiguration point, checks them and
returns them as :class:`~elastream.runtime.decisions.Applied`. Controllers
never see the handle (STYLE.md: they read snapshots and return decisions).

Levels the user fixed (``Runner(threads=2)``) are never changed: decisions
about them are dropped before they are applied.

Threading: :class:`ElasticLoop` runs on its own daemon thread
("elastream-elastic"), not on the engine's monitor or supervisor thread, so a
decision that waits for a worker process's answer never blocks the thread that
reads that answer. :meth:`ElasticLoop.step` is the deterministic core the
tests call directly with recorded statistics.

Example::

    loop = ElasticLoop(handle, Elastic(period_s=0.5), controllers, Levels(threads=(1,)))
    loop.start(); ...; loop.stop()
    loop.timeline.to_json()
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

from elastream.elastic.config import Elastic
from elastream.metrics.period import PeriodStats, period_between
from elastream.metrics.stats import FlowStats
from elastream.metrics.timeline import Timeline
from elastream.runtime.decisions import (MOVED_WHOLE, Applied, Decision, Fuse, Levels, SetProcesses, SetReplicas,
                                         SetThreads, Unfuse, fused_after)


@dataclass(frozen=True, slots=True)
class Fixed:
    """The levels the user fixed, which no controller may change."""

    threads: bool = False
    processes: bool = False
    processes_hint: str | None = None
    """Why the run cannot add processes although the caller left them free (said once, when wanted)."""


class ElasticLoop:
    """Runs the controllers on a running flow once a period and applies their decisions."""

    def __init__(self, handle: Any, elastic: Elastic, controllers: Sequence[Any], levels: Levels,
                 fixed: Fixed = Fixed(), machine: Callable[[Levels], Any] | None = None):
        self.handle = handle
        self.elastic = elastic
        self.controllers = list(controllers)
        self.levels = levels
        self.fixed = fixed
        self.timeline = Timeline()
        self._machine = machine
        self._before: FlowStats | None = None
        self._unapplied: set[Decision] = set()
        self._said: set[str] = set()
        self._stop = threading.Event()
        self._levels_lock = threading.Lock()  # the caller's own decisions fold into the levels too
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        """What stopped the loop when a controller or the handle failed (the run itself goes on)."""

    # -- thread ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start deciding once a period, on the loop's own thread."""
        self._thread = threading.Thread(target=self._run, name="elastream-elastic", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the loop and wait for its thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        finished = self.handle.finished
        wait = min(self.elastic.first_period_s, self.elastic.period_s)
        try:
            while not self._stop.wait(wait) and not finished.is_set():
                self.step(self.handle.stats())
                wait = self.elastic.period_s
        except BaseException as error:  # noqa: BLE001 - elasticity failing must not fail the run
            self.error = error
            print(f"elastream: elasticity stopped, the flow runs on at its current levels: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)

    # -- one period ---------------------------------------------------------------------------------
    def step(self, stats: FlowStats) -> list[Applied]:
        """One period ending at ``stats``: decide, apply, record. Returns what was applied."""
        period = period_between(self._before, stats)
        self._before = stats
        machine = self._machine(self.levels) if self._machine is not None else None
        decisions = self._decide(period, machine)
        applied, pause_ms = self._apply(decisions, at_s=stats.elapsed_s)
        pause_ms = with_holds(pause_ms, period)
        self.fold(applied)
        self.timeline.record(period, self.levels, applied, pause_ms=pause_ms)
        return applied

    def fold(self, applied: Sequence[Applied]) -> None:
        """Fold what took effect into the levels (the loop's own decisions, and the caller's through
        ``handle.submit``, so the controllers never size from a count the caller changed)."""
        with self._levels_lock:
            self.levels = levels_after(self.levels, applied)

    def record_final(self, stats: FlowStats) -> None:
        """Record the run's last (partial) period, ending at its final ``stats``, without deciding."""
        if self._before is not None and stats.elapsed_s <= self._before.elapsed_s:
            return
        self.timeline.record(period_between(self._before, stats), self.levels, ())
        self._before = stats

    def _decide(self, period: PeriodStats, machine: Any) -> list[Decision]:
        decisions: list[Decision] = []
        for controller in self.controllers:
            decisions.extend(d for d in controller.decide(period, self.levels, machine) if self._allowed(d))
        return decisions

    def _allowed(self, decision: Decision) -> bool:
        """False for a decision about a level the user fixed, or one that changes nothing."""
        if isinstance(decision, SetThreads):
            if self.fixed.threads or decision.process >= self.levels.processes:
                return False
            return decision.threads != self.levels.threads[decision.process]
        if isinstance(decision, SetProcesses):
            if self.fixed.processes or decision.count == self.levels.processes:
                return False
            if self.fixed.processes_hint is not None and decision.count > self.levels.processes:
                self._say_once(self.fixed.processes_hint)
                return False
            return True
        if isinstance(decision, SetReplicas):
            return decision.count != self.levels.replicas.get(decision.operator) or moves_whole(decision, self.levels)
        return True

    def _say_once(self, line: str) -> None:
        """Print ``line`` on stderr the first time only (a hint must not repeat every period)."""
        if line not in self._said:
            self._said.add(line)
            print(f"elastream: {line}", file=sys.stderr)

    def _apply(self, decisions: list[Decision], at_s: float) -> tuple[list[Applied], float | None]:
        """Submit the decisions that change something; the pause is how long applying them held the run.

        The pause is the longest a part's reconfiguration point took (each backend measures its own:
        a thread joins or leaves between two batches, a split changes its routing between two
        batches, a regroup waits for its safe point); only where no part measured it, the time
        around ``submit`` (then an upper bound, round trips to worker processes included). Decisions
        refused (a part that has ended, one still starting) held nothing: alone, they pause nothing.
        """
        actionable = [d for d in decisions if is_applied_by_runtime(d) and is_supported(d, self.levels)]
        notes = [Applied(d, at_s, True, "recorded") for d in decisions if not is_applied_by_runtime(d)]
        notes += self._not_supported(
            [d for d in decisions if is_applied_by_runtime(d) and not is_supported(d, self.levels)], at_s)
        if not actionable:
            return notes, None
        began = perf_counter()
        applied = list(self.handle.submit(actionable))
        measured = [a.pause_ms for a in applied if a.pause_ms is not None]
        if measured:
            return applied + notes, max(measured)
        return applied + notes, (perf_counter() - began) * 1000.0 if any(a.ok for a in applied) else None

    def _not_supported(self, decisions: list[Decision], at_s: float) -> list[Applied]:
        """Decisions no backend applies yet, each recorded the first period it is proposed (not every period)."""
        fresh = [d for d in decisions if d not in self._unapplied]
        self._unapplied = set(decisions)
        return [Applied(d, at_s, False, f"{type(d).__name__} is not applied while a flow runs yet") for d in fresh]


def with_holds(pause_ms: float | None, period: PeriodStats) -> float | None:
    """The period's pause: the reconfiguration point's, or a longer hold that ended in the period (a key
    group's tuples held until its state reached the replica it moved to, after an earlier decision)."""
    held = max((op.new_hold_s for op in period.operators.values()), default=0.0) * 1000.0
    if held <= 0.0:
        return pause_ms
    return held if pause_ms is None else max(pause_ms, held)


def is_supported(decision: Decision, levels: Levels) -> bool:
    """True for decisions the backends apply while a flow runs: thread counts, the active replicas
    of an operator the run holds replicas of, and fusion in a one-process run (the threads backend
    regroups its tasks, runtime.refuse); the others are recorded as proposals."""
    if isinstance(decision, SetThreads):
        return True
    if isinstance(decision, (Fuse, Unfuse)):
        return not levels.chains_as_built
    return isinstance(decision, SetReplicas) and decision.operator in levels.replicas


def is_applied_by_runtime(decision: Decision) -> bool:
    """True for decisions that change the run; False for informational ones (a hot key named)."""
    return not getattr(decision, "informational", False)


def levels_after(levels: Levels, applied: Sequence[Applied]) -> Levels:
    """``levels`` with the decisions that took effect folded in."""
    threads = list(levels.threads)
    replicas = dict(levels.replicas)
    fused = list(levels.fused)
    moved = dict(levels.moved)
    for a in applied:
        if a.ok and isinstance(a.decision, SetThreads) and a.decision.process < len(threads):
            threads[a.decision.process] = a.decision.threads
        elif a.ok and isinstance(a.decision, SetReplicas) and a.decision.operator in replicas:
            replicas[a.decision.operator] = a.decision.count
            if a.why == MOVED_WHOLE:
                moved[a.decision.operator] = a.decision.replicas[0]  # type: ignore[index]
        elif a.ok and isinstance(a.decision, (Fuse, Unfuse)):
            fused = list(fused_after(fused, a.decision))
    return replace(levels, threads=tuple(threads), replicas=replicas, fused=tuple(fused), moved=moved)


def moves_whole(decision: SetReplicas, levels: Levels) -> bool:
    """True for a decision that may run a held unit whole in another process (runtime.bypass): one replica, not
    the first, in a run with processes held ready, for a unit that did not move yet. Its count may be the
    unit's count already: it still changes where the unit runs."""
    return (levels.held and decision.count == 1 and decision.replicas is not None and len(decision.replicas) == 1
            and decision.replicas[0] != 0 and decision.operator not in levels.moved)
