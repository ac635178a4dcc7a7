"""External readiness poller: wakes operators blocked on things outside the process.

An operator waiting for a shared-memory ring (data from, or space in, a ring
shared with another process) is parked READ_BLOCKED / WRITE_BLOCKED with a
probe; no worker thread spins on it. One poller thread per scheduler checks
the registered probes and hands ready operators back to the scheduler.

When every waiting operator came with a :class:`Waiter` (a ring's reader: the
other process writes a byte to its wake pipe after publishing), the poller
arms them all, looks at the probes once more (so nothing published meanwhile
is missed) and sleeps in ``select`` on their file descriptors: a record from
another process wakes its reader within tens of microseconds and an idle flow
costs no wake-ups. Otherwise its sleep between rounds backs off exponentially
while nothing happens (from ``min_sleep_s`` to ``max_sleep_s``) and resets as
soon as a probe fires.

While every worker of the process is busy, a woken task could not run before
one of them finishes its activation anyway, so the workers look at the probes
themselves as they pick their next task (:meth:`ExternalPoller.take_ready`, at
most every ``INLINE_POLL_S``) and the thread sleeps until a worker goes idle
(:meth:`ExternalPoller.worker_idle`). A poller thread woken by every record
from another process takes the GIL from the computing worker each time: in
C-Stream Fig. 11 on two processes with its six branches replicated, the
poller thread alone made 900 futex calls a second in each process, where the
static run's processes made 140 a second in all.

Threading: ``register``, ``take_ready`` and ``worker_idle`` are called by the
scheduler with its lock held; the poller thread calls ``Scheduler.wake_external``
(which takes that lock) and never holds its own locks while doing so. One
thread at a time runs the probes (a ring sender's probe writes). Waiters are
armed and disarmed by the poller thread only.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task


class Waiter(Protocol):
    """What lets the poller sleep on a file descriptor until another process makes a probe true."""

    def arm(self) -> int | None:
        """Ask to be woken (e.g. announce a sleeping reader); the fd that becomes readable, or None: poll."""

    def disarm(self) -> None:
        """Withdraw the request and consume what the fd received."""


#: Longest a poller sleeps on armed waiters alone: a safety net, should a wake-up ever be lost (a ring's
#: producer wakes its reader on every publish and on its close). Each timeout re-arms every waiter and
#: takes the GIL from the worker threads: at 0.05 s it was 20 wake-ups a second of an idle ring's reader,
#: e.g. a held worker's that is never started.
WAITER_TIMEOUT_S = 0.5
#: Least time between two looks at the probes by busy workers: each look runs every waiting task's probe
#: (a few microseconds for a dozen rings), and a task it wakes waits for the look's worker to finish its
#: current activation anyway.
INLINE_POLL_S = 0.0005


class ExternalPoller:
    """Polls the probes of externally blocked tasks: sleeping on their waiters' fds, or with capped
    exponential back-off."""

    def __init__(self, sched: Scheduler, *, min_sleep_s: float = 20e-6, max_sleep_s: float = 1e-3):
        self.sched = sched
        self.min_sleep_s = min_sleep_s
        self.max_sleep_s = max_sleep_s
        self._waiting: dict[Task, tuple[Callable[[], bool], Waiter | None]] = {}
        self._lock = threading.Lock()
        self._kick_r, self._kick_w = os.pipe()
        for fd in (self._kick_r, self._kick_w):
            os.set_blocking(fd, False)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.wakeups = 0
        #: The scheduler's workers look at the probes while they are all busy (they call take_ready and
        #: worker_idle); False: this thread always does.
        self.inline = False
        #: This thread sleeps, leaving the probes to the busy workers, until one of them goes idle.
        self.passive = False
        self._probing = threading.Lock()
        self._next_inline = 0.0

    def register(self, task: Task, probe: Callable[[], bool], waiter: Waiter | None = None) -> None:
        """Watch ``probe`` for ``task`` (starts the thread on first use); ``waiter``: see :class:`Waiter`."""
        with self._lock:
            self._waiting[task] = (probe, waiter)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="elastream-poller", daemon=True)
                self._thread.start()
        self._kick()

    def take_ready(self, now: float, force: bool = False) -> list[Task]:
        """The waiting tasks whose probes hold now, no longer watched: a worker's look between activations
        (at most every ``INLINE_POLL_S`` unless ``force``; none while this thread is running the probes)."""
        if not self._waiting or (not force and now < self._next_inline):
            return []
        self._next_inline = now + INLINE_POLL_S
        if not self._probing.acquire(blocking=False):
            return []
        try:
            return self._take_ready()
        finally:
            self._probing.release()

    def worker_idle(self) -> None:
        """A worker is about to wait for work: a thread leaving the probes to the workers takes them back."""
        if self.passive:
            self._kick()

    def forget(self, task: Task) -> None:
        """Stop watching ``task`` (it was woken another way, e.g. by shutdown)."""
        with self._lock:
            self._waiting.pop(task, None)

    def stop_async(self) -> None:
        """Ask the thread to end without waiting (safe under the scheduler lock)."""
        self._stop = True
        self._kick()
        if self._thread is None:
            self._close_kick()

    def stop(self) -> None:
        """End the poller thread and join it."""
        self._stop = True
        self._kick()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(2.0)
        if t is None:
            self._close_kick()

    def _kick(self) -> None:
        with self._lock:  # never write to a closed fd's number (it may name another file by now)
            if self._kick_w >= 0:
                try:
                    os.write(self._kick_w, b"k")
                except (BlockingIOError, OSError):  # full: a kick is pending anyway
                    pass

    def _close_kick(self) -> None:
        with self._lock:
            fds, self._kick_r, self._kick_w = (self._kick_r, self._kick_w), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def _loop(self) -> None:
        try:
            self._run()
        finally:
            self._close_kick()

    def _run(self) -> None:
        sleep = self.min_sleep_s
        while not self._stop:
            if self._leave_to_workers():
                continue
            if self._poll_once():
                sleep = self.min_sleep_s
                time.sleep(0)  # hand the GIL to the worker just woken before looking again
                continue
            with self._lock:
                waiters = [w for _, w in self._waiting.values()]
            if not waiters:
                self._sleep([], None)  # nothing registered: until a registration kicks us
                continue
            if all(w is not None for w in waiters) and self._sleep_on_waiters(waiters):  # type: ignore[arg-type]
                sleep = self.min_sleep_s
                continue
            self._sleep([], sleep)
            sleep = min(sleep * 2, self.max_sleep_s)

    def _leave_to_workers(self) -> bool:
        """While every worker is busy, sleep until one goes idle and kicks (True); False: poll now."""
        sched = self.sched
        if not self.inline or sched.idle_workers or not sched.busy_workers:
            return False
        self.passive = True
        try:
            # Published before the look: a worker going idle from here on sees ``passive`` and kicks.
            if sched.idle_workers or not sched.busy_workers:
                return False
            self._sleep([], WAITER_TIMEOUT_S)
            return True
        finally:
            self.passive = False

    def _sleep_on_waiters(self, waiters: list[Waiter]) -> bool:
        """Arm every waiter, re-check the probes, sleep on the fds; False if a waiter cannot be slept on."""
        armed: list[Waiter] = []
        try:
            fds = []
            for w in waiters:
                armed.append(w)
                fd = w.arm()
                if fd is None:
                    return False
                fds.append(fd)
            if self._poll_once():  # published between our last look and the arming: no lost wake-up
                return True
            self._sleep(fds, WAITER_TIMEOUT_S)
            return True
        finally:
            for w in armed:
                w.disarm()

    def _sleep(self, fds: list[int], timeout: float | None) -> None:
        kick = self._kick_r  # only this thread closes it (at its end)
        try:
            select.select([kick, *fds], [], [], timeout)
        except (OSError, ValueError):  # an fd closed under us (a ring closing at shutdown): look again
            return
        try:
            os.read(kick, 4096)
        except (BlockingIOError, OSError):
            pass

    def _poll_once(self) -> bool:
        with self._probing:
            ready = self._take_ready()
        if not ready:
            return False
        for task in ready:
            self.wakeups += 1
            self.sched.wake_external(task)
        return True

    def _take_ready(self) -> list[Task]:
        """Run every waiting task's probe (``_probing`` held); the ready ones, no longer watched."""
        with self._lock:
            items = [(task, probe) for task, (probe, _) in self._waiting.items()]
        ready = []
        for task, probe in items:
            try:
                ok = probe()
            except Exception:  # noqa: BLE001 - a broken probe must wake the task so it sees the error
                ok = True
            if ok:
                ready.append(task)
        if ready:
            with self._lock:
                for task in ready:
                    self._waiting.pop(task, None)
        return ready
