"""The dedicated threading model: one worker thread per operator, blocking on its own inputs.

``Runner(model="dedicated")`` (IBM Streams §2.2's "dedicated" model, the model most engines use
and Haren's "OS scheduling" baseline): every task gets a worker of its own
(:meth:`~elastream.runtime.workers.WorkerPool.start_dedicated`), which only ever runs that task,
and the operating system's scheduler decides which thread runs. It stays on the one scheduler
mechanism: the task's states, waits, back-pressure, termination and shutdown are the scheduler's
(:mod:`elastream.runtime.scheduler`); only the choice of the next task differs. No policy is
consulted: a worker's next task is always its own, once READY.

Each task carries a condition on the scheduler's lock (``Task.waker``); ``Scheduler._make_ready``
notifies exactly that one, so a wake-up reaches the one thread that can use it (the pool's shared
condition would wake an arbitrary idle thread). A worker whose task has completed ends.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from elastream.runtime.states import OperatorState

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task
    from elastream.runtime.workers import Worker

_DONE = OperatorState.COMPLETED
#: Longest wait of an idle dedicated worker with no timer due (it re-checks, then waits again).
IDLE_WAIT_S = 1.0


def bind(sched: Scheduler, task: Task) -> None:
    """Give ``task`` a condition of its own on the scheduler's lock, for its dedicated worker."""
    task.waker = threading.Condition(sched.lock)


def next_own(sched: Scheduler, worker: Worker, block: bool = True) -> Task | None:
    """``worker``'s own task once it is READY (lock held); None when the worker must end.

    Due timers and the periodic call run here as in the worker pool's look for work; an idle
    worker waits on its task's condition, bounded by the next timer and, when it keeps the
    periodic call (no worker busy, no other keeper), by that call's due time.
    """
    task = worker.own
    while True:
        if worker.retiring or sched.finished.is_set() or task.state is _DONE:
            return None
        now = sched.fire_due(sched.now())
        if task in sched.ready and task not in sched.held:
            del sched.ready[task]
            sched.occupy_locked(task)
            return task
        if not block:
            return None
        _wait_own(sched, worker, task, now)


def _wait_own(sched: Scheduler, worker: Worker, task: Task, now: float) -> None:
    timers = sched.timers
    wake = timers[0][0] if timers else now + IDLE_WAIT_S
    keeps_periodic = sched.periodic_keeper is None and sched.busy_workers == 0
    if keeps_periodic:
        sched.keep_periodic(worker)
        wake = min(wake, sched.next_periodic_due)
    sched.idle_workers += 1
    sched.poller.worker_idle()
    t0 = sched.now()
    task.waker.wait(max(0.0, wake - t0))  # type: ignore[union-attr]
    worker.idle_s += sched.now() - t0
    sched.idle_workers -= 1
    if keeps_periodic:
        sched.keep_periodic(None)
