"""Haren's execution task T_E (§5, Algorithm 1): a worker runs its own sorted list until the period ends.

The scheduler hands a worker of a Haren run to :func:`next_task` (its per-worker pick path) with its
lock held. The worker

* runs a scheduling task (:mod:`~elastream.policies.haren.scheduling_task`) once P has passed since
  its last one, with the lock released, then the operators of its list not run for more than d
  (when the policy reads an execution-intrinsic feature);
* otherwise takes the highest-priority operator of its list that can run (READY: input to read and
  room to write, the scheduler's ``canRun``). After running one, the next one down the list is taken
  only while it has the same priority vector (Algorithm 1, line 6), else the list is scanned again
  from its top;
* backs off when nothing can run: it sleeps, starting from a short wait and doubling it, never past
  the end of its execution task (§5). No producer wakes it (the policy declares ``backoff``, so the
  scheduler notifies no idle worker when an operator becomes READY).

The one way to take a task is :meth:`Scheduler.occupy_locked`, as for every model; an operator is
on one worker's list only, and a RUNNING one is in no ready set, so at most one worker runs it.

Threading: every function here runs on a worker thread with the scheduler's lock held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from elastream.policies.haren.state import HarenState, WorkerSlot

#: Longest single back-off sleep (s): the paper bounds it by the rest of the execution task only; a
#: 100 ms period would let an idle worker miss a burst for up to half of it.
MAX_BACKOFF_S = 0.010


def pick(state: HarenState, slot: WorkerSlot, ready: Any, held: Any) -> Any:
    """The operator ``slot``'s worker runs next (Algorithm 1 lines 5-13, delayed operators first), or None."""
    due = slot.due
    while due:
        view = due.pop()
        task = view.task
        if task in ready and not (held and task in held):
            slot.delayed_runs += 1
            return view
    order, prios = slot.order, slot.prios
    n = len(order)
    start = slot.cursor
    if 0 < start < n and prios[start] == slot.last_prio:
        for j in range(start, n):
            if prios[j] != slot.last_prio:
                break
            task = order[j].task
            if task in ready and not (held and task in held):
                slot.cursor = j + 1
                return order[j]
    for j in range(n):
        task = order[j].task
        if task in ready and not (held and task in held):
            slot.cursor = j + 1
            slot.last_prio = prios[j]
            return order[j]
    slot.cursor = 0
    return None


def delayed(state: HarenState, slot: WorkerSlot, now: float) -> list:
    """The operators of ``slot``'s list not run for more than d (Algorithm 1, lines 20-24), if the
    policy reads an execution-intrinsic feature; the most starved last (taken first)."""
    if not state.table.execution_intrinsic:
        return []
    d = state.spec.delay_s
    last = state.last_run
    late = [v for v in slot.order if now - last[v.index] > d]
    late.sort(key=lambda v: last[v.index], reverse=True)
    return late


def idle_wait(sched: Any, worker: Any, slot: WorkerSlot, now: float, period_s: float) -> None:
    """Back off: sleep (lock released) for the slot's back-off, then double it (§5)."""
    wake = min(now + slot.backoff_s, slot.t_y + period_s)
    timers = sched.timers
    if timers:
        wake = min(wake, timers[0][0])
    if sched.next_periodic_due < wake:
        wake = max(now, sched.next_periodic_due)
    slot.backoff_s = min(slot.backoff_s * 2, MAX_BACKOFF_S)
    sched.idle_workers += 1
    t0 = sched.now()
    sched.cond.wait(max(0.0, wake - t0))
    if hasattr(worker, "idle_s"):
        worker.idle_s += sched.now() - t0
    sched.idle_workers -= 1
