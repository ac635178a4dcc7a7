"""The scheduler's timers (sleeping operators) and its periodic call, a part of :class:`~elastream.runtime.scheduler.Scheduler`.

A mixin, so the scheduler module stays one screenful per concern; every method runs with, or takes,
the scheduler's one lock (``self.lock``), and reads the state the scheduler's ``__init__`` sets:
``_timers`` (a heap of ``(due, seq, task)``), ``_periodic``, ``_periodic_s``, ``_next_periodic`` and
``_periodic_keeper``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from elastream.runtime.states import OperatorState

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.task import Task
    from elastream.runtime.workers import Worker

SLEEPING = OperatorState.SLEEPING


class TimersAndPeriodic:
    """Due timers wake their sleepers; the periodic call runs on a worker between two activations."""

    lock: Any
    cond: Any
    idle_workers: int
    ready: dict
    _timers: list[tuple[float, int, Task]]
    _periodic: Callable[[float], None] | None
    _periodic_s: float
    _next_periodic: float
    _periodic_keeper: Worker | None
    now: Callable[[], float]
    _make_ready: Callable[[Task], None]

    def work_waiting(self) -> bool:
        """True when an operator waits for a worker: one is ready, or its timer is due, and no worker is idle.

        A hint, read without the lock (a heap's head is read atomically under the GIL): a due
        timer moves its operator to ``ready`` only at the next look for work, so both count;
        an idle worker takes either at once.
        """
        if self.idle_workers:
            return False
        if self.ready:
            return True
        timers = self._timers
        try:
            return bool(timers) and timers[0][0] <= self.now()
        except IndexError:  # emptied by another worker between the two reads
            return False

    def next_timer(self) -> float | None:
        """When the earliest pending timer (a sleeping operator's) is due, on the scheduler's clock; None: none."""
        with self.lock:
            return self._timers[0][0] if self._timers else None

    @property
    def periodic_keeper(self) -> Worker | None:
        """The idle worker whose wait is bounded by the periodic call's due time (None: no idle worker keeps it,
        e.g. while another worker is busy and will make the call at its next dispatch). Read without the lock."""
        return self._periodic_keeper

    def set_periodic(self, period_s: float, fn: Callable[[float], None]) -> None:
        """Call ``fn(now)`` about every ``period_s`` from a worker thread, between two activations.

        Under the scheduler's lock, so ``fn`` must be short and must not call back into the
        scheduler. Work that would otherwise need a thread of its own waking every period
        (each wake-up takes the GIL from a computing worker: ~1 ms lost to the hand-over on
        the 2-vCPU VM) runs where the GIL already is. When every worker is idle, one of them
        wakes for it; while one is busy, that one makes the call at its next dispatch (after
        at most its quantum).
        """
        with self.lock:
            self._periodic, self._periodic_s = fn, period_s
            self._next_periodic = self.now() + period_s
            if self.idle_workers:
                self.cond.notify()  # an idle worker must recompute its wait timeout

    def fire_due(self, now: float) -> float:
        """Wake the sleepers whose timers are due and make the periodic call if due (lock held); returns ``now``."""
        if self._timers:
            self._fire_timers(now)
        if self._next_periodic <= now:
            self._run_periodic(now)
        return now

    @property
    def timers(self) -> list[tuple[float, int, Task]]:
        """The pending timers, a heap by due time (lock held to read it)."""
        return self._timers

    @property
    def next_periodic_due(self) -> float:
        """When the periodic call is due next (inf: none)."""
        return self._next_periodic

    def keep_periodic(self, worker: Worker | None) -> None:
        """Record the idle worker whose wait is bounded by the periodic call (None: it woke); lock held."""
        self._periodic_keeper = worker

    def _run_periodic(self, now: float) -> None:
        self._next_periodic = now + self._periodic_s
        self._periodic(now)  # type: ignore[misc]

    def _fire_timers(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, seq, task = heapq.heappop(timers)
            if task.state is SLEEPING and task.sleep_seq == seq:
                self._make_ready(task)
