"""Periodic statistics monitor: recent read/write rates and policy ticks.

Every ``period_s`` it updates each task's recent rates (C-Stream §3.2.6
"recent read rates ... recent write rates") and, for policies that ask for
it, calls ``policy.on_tick`` with a snapshot. Further periodic controllers
(elasticity) register through ``add_hook``.

Hooks run on a daemon thread of their own (a snapshot takes the scheduler's
lock, and a controller may resize the pool). Without hooks the rates are
sampled by the workers themselves between two activations
(:meth:`Scheduler.set_periodic`): a thread waking ten times a second takes the
GIL from a computing worker each time, which cost ~2.5% of a one-process run
of ``bench keyed`` on the 2-vCPU VM (the worker's time off the CPU while busy
halved without it).

Time comes from ``clock`` (default: the scheduler's, see
:mod:`elastream.runtime.clock`), so a test can sample at instants it chooses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from elastream.runtime.clock import Clock

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.scheduler import Scheduler


class Monitor:
    """Samples counters every period until stopped."""

    def __init__(self, sched: Scheduler, period_s: float, clock: Clock | None = None):
        self.sched = sched
        self.period_s = period_s
        self.clock: Clock = sched.clock if clock is None else clock
        self._now = self.clock.now
        self._hooks: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._last: dict[str, tuple[float, int, int]] = {}
        self._thread = threading.Thread(target=self._loop, name="elastream-monitor", daemon=True)
        self._sampled_by_workers = False

    def add_hook(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` every period (from the monitor thread, started now if the run is already on)."""
        self._hooks.append(fn)
        if self._sampled_by_workers and not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def start(self) -> None:
        """Start sampling: on the monitor thread when there are hooks, else from the workers."""
        if self._hooks:
            self._thread.start()
        else:
            self._sampled_by_workers = True
            self.sched.set_periodic(self.period_s, self._sample_at)

    def stop(self) -> None:
        """Stop and join the monitor thread (if it runs)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _sample_at(self, now: float) -> None:
        if not self._stop.is_set():
            self.sample_rates(now)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._sampled_by_workers:
                self.sample_rates()
            for hook in self._hooks:
                hook()

    def sample_rates(self, now: float | None = None) -> None:
        """Update each task's read/write rate over the last period."""
        if now is None:
            now = self._now()
        for t in self.sched.tasks:
            prev = self._last.get(t.name)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                t.read_rate = (t.tuples_in - prev[1]) / dt
                t.write_rate = (t.tuples_out - prev[2]) / dt
            self._last[t.name] = (now, t.tuples_in, t.tuples_out)
