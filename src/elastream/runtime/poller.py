"""External readiness poller: wakes operators blocked on things outside the process.

An operator waiting for a shared-memory ring (data from, or space in, a ring
shared with another process) is parked READ_BLOCKED / WRITE_BLOCKED with a
probe; no worker thread spins on it. One poller thread per scheduler checks
the registered probes and hands ready operators back to the scheduler. Its
sleep between rounds backs off exponentially while nothing happens (from
``min_sleep_s`` to ``max_sleep_s``) and resets as soon as a probe fires, so an
idle flow costs a few hundred wake-ups per second and a busy one reacts within
tens of microseconds.

Threading: ``register`` is called by the scheduler with its lock held; the
poller thread calls ``Scheduler.wake_external`` (which takes that lock) and
never holds its own lock while doing so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task


class ExternalPoller:
    """Polls the probes of externally blocked tasks with capped exponential back-off."""

    def __init__(self, sched: Scheduler, *, min_sleep_s: float = 20e-6, max_sleep_s: float = 1e-3):
        self.sched = sched
        self.min_sleep_s = min_sleep_s
        self.max_sleep_s = max_sleep_s
        self._waiting: dict[Task, Callable[[], bool]] = {}
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.wakeups = 0

    def register(self, task: Task, probe: Callable[[], bool]) -> None:
        """Watch ``probe`` for ``task`` (starts the thread on first use)."""
        with self._lock:
            self._waiting[task] = probe
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="elastream-poller", daemon=True)
                self._thread.start()
        self._kick.set()

    def forget(self, task: Task) -> None:
        """Stop watching ``task`` (it was woken another way, e.g. by shutdown)."""
        with self._lock:
            self._waiting.pop(task, None)

    def stop_async(self) -> None:
        """Ask the thread to end without waiting (safe under the scheduler lock)."""
        self._stop = True
        self._kick.set()

    def stop(self) -> None:
        """End the poller thread and join it."""
        self._stop = True
        self._kick.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(2.0)

    def _loop(self) -> None:
        sleep = self.min_sleep_s
        while not self._stop:
            fired = self._poll_once()
            if fired:
                sleep = self.min_sleep_s
                continue
            with self._lock:
                idle = not self._waiting
            # Nothing registered: sleep until a registration kicks us.
            self._kick.wait(None if idle else sleep)
            self._kick.clear()
            sleep = min(sleep * 2, self.max_sleep_s)

    def _poll_once(self) -> bool:
        with self._lock:
            items = list(self._waiting.items())
        ready = []
        for task, probe in items:
            try:
                ok = probe()
            except Exception:  # noqa: BLE001 - a broken probe must wake the task so it sees the error
                ok = True
            if ok:
                ready.append(task)
        if not ready:
            return False
        with self._lock:
            for task in ready:
                self._waiting.pop(task, None)
        for task in ready:
            self.wakeups += 1
            self.sched.wake_external(task)
        return True
