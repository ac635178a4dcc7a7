"""The base scheduler mechanism (C-Stream §3.2): states, waits, back-pressure,
preemption and termination. Which READY operator runs next is the policy's
choice (:mod:`elastream.policies`); this module never imports a concrete policy.

Threading model: one lock (``self.lock``) guards every operator state change,
the ready set, the timers and the wait conditions. Workers call
:meth:`acquire` / :meth:`release` between dispatches; operator code (running in
a worker, lock not held) calls :meth:`port_written` / :meth:`port_read` only
when a peer may be blocked, so the common push/pop path takes no scheduler lock.

Lost-wake-up freedom: a blocking task sets its state to READ_BLOCKED (or
registers in ``write_waiters``) *before* re-checking its condition under the
lock, and a producer (consumer) checks the state (waiters) *after* changing the
buffer. Under the GIL these steps are sequentially consistent, so one of the two
always sees the other.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from elastream.policies.failures import after_failure
from elastream.runtime.blame import named_failure
from elastream.runtime.clock import Clock, resolve
from elastream.runtime.dedicated import next_own
from elastream.runtime.states import OperatorState
from elastream.runtime.timers import TimersAndPeriodic
from elastream.runtime.poller import ExternalPoller
from elastream.runtime.ready import new_ready_set, next_stamp
from elastream.runtime.reconfigure_hooks import ReconfigurationHooks
from elastream.runtime.traps import (COMPLETED, LEAVE, PREEMPT, ExternalWait, Failed, Outcome, ReadWait, Sleep,
                                     WaitMode, WriteWait)

if TYPE_CHECKING:  # pragma: no cover
    from elastream.policies.base import SchedulingPolicy
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.task import Task
    from elastream.runtime.workers import Worker

READY = OperatorState.READY
RUNNING = OperatorState.RUNNING
READ_BLOCKED = OperatorState.READ_BLOCKED
WRITE_BLOCKED = OperatorState.WRITE_BLOCKED
SLEEPING = OperatorState.SLEEPING
DONE = OperatorState.COMPLETED


class Scheduler(TimersAndPeriodic, ReconfigurationHooks):
    """Operator states and transitions for one running flow."""

    def __init__(self, tasks: list[Task], policy: SchedulingPolicy, *, shutdown_grace_s: float = 1.0,
                 clock: Clock | None = None):
        self.lock = threading.Lock()
        #: The time source of timers, sleeps, deadlines and the periodic call (see runtime.clock);
        #: ``now`` is its bound ``now`` (for the real clock, the perf_counter function itself).
        self.clock = resolve(clock)
        self.now = self.clock.now
        self.cond = threading.Condition(self.lock)
        self.tasks = tasks
        self.policy = policy
        #: Tasks that hand work to another process (``OperatorSpec.urgent``: a ring's sending end). One
        #: that is READY runs ahead of the policy's pick: a core in the other process waits for what it
        #: sends, and its activation is short. A run's first pieces otherwise waited behind the local
        #: replica's first activation (20-25 ms of a 12 x 100 us chain on two processes).
        self.urgent: tuple[Task, ...] = tuple(t for t in tasks if t.spec.urgent)
        #: (first, longest) wait of an idle worker that backs off instead of being woken (a policy's
        #: ``backoff``: IBM Streams §4.1.3); None: idle workers wait to be notified.
        self.backoff: tuple[float, float] | None = getattr(policy, "backoff", None)
        #: Wake-ups a producer leaves without taking the lock, applied at the next pick (a backing-off
        #: policy's ``lockless_wakeups``: IBM Streams §4.1.4's producer pushes onto the free list
        #: without touching global data; its idle workers look again within the back-off anyway).
        self.arrivals: deque[PortBuffer] | None = (
            deque() if self.backoff is not None and getattr(policy, "lockless_wakeups", False) else None)
        #: A policy that keeps a list of operators per worker (Haren's execution task: policies.haren)
        #: chooses each worker's next task itself, through ``next_task(sched, worker, block)``.
        self.per_worker = policy if getattr(policy, "per_worker", False) else None
        #: READY tasks in the order they became ready, each mapped to its arrival stamp (runtime.ready:
        #: a policy's index follows the set through them).
        self.ready: dict[Task, int] = new_ready_set(policy)
        self._timers: list[tuple[float, int, Task]] = []
        self._timer_seq = 0
        self._periodic: Callable[[float], None] | None = None
        self._periodic_s = 0.0
        self._next_periodic = float("inf")
        self._periodic_keeper: Worker | None = None
        self.busy_workers = 0
        self.live = len(tasks)
        self.idle_workers = 0
        self.shutdown_requested = False
        self.shutdown_time = 0.0
        self.shutdown_grace_s = shutdown_grace_s
        # (operator name, failure): the first failure wins and is re-raised by the runner.
        self.failure: tuple[str, Failed] | None = None
        self.finished = threading.Event()
        # Reconfiguration (runtime.refuse): held tasks are never dispatched; while ``regrouping``, every
        # release and a shutdown notify ``settled``, on which the reconfiguring thread waits for a safe point.
        self.held: set[Task] = set()
        self.regrouping = False
        self.settled = threading.Condition(self.lock)
        #: Called (lock held) when a task completes: a bypassed unit ends its split and merge (runtime.bypass).
        self.on_completed: dict[Task, Callable[[], None]] = {}
        self.poller = ExternalPoller(self)
        self.poller.inline = self.per_worker is None  # the shared path looks at the probes (_next_locked)
        for t in tasks:
            t.sched = self
            t.now = self.now  # the tasks' batches and deadlines read the run's clock too
            self.ready[t] = next_stamp()

    # -- worker entry points ---------------------------------------------------
    def acquire(self, worker: Worker) -> Task | None:
        """Block until a READY task is available for ``worker``; None: exit."""
        with self.lock:
            return self._next_locked(worker)

    def acquire_nowait(self, worker: Worker) -> Task | None:
        """A READY task for ``worker`` (due timers and the periodic call first), or None at once.

        The one-step harness's entry point (:mod:`elastream.runtime.harness`): a
        test thread that must never block in the scheduler.
        """
        with self.lock:
            return self._next_locked(worker, block=False)

    def release(self, worker: Worker, task: Task, outcome: Outcome, busy_s: float = 0.0,
                cpu_s: float = 0.0) -> Task | None:
        """Apply ``task``'s outcome and hand ``worker`` its next task in one lock hold.

        The dispatch's busy and CPU seconds are added here, under the lock,
        because several workers may share one task (dynamic allotment).
        """
        with self.lock:
            self._release_locked(task, outcome, busy_s, cpu_s)
            return self._next_locked(worker)

    def try_claim(self, task: Task) -> bool:
        """Take READY ``task`` for the calling worker if no other runs it (IBM Fig. 5's ``consTryLock``).

        False at once when it is running, blocked, held or done: the caller does something else rather
        than wait. A claimed task is given back with :meth:`release_nowait`.
        """
        with self.lock:
            if self.arrivals:
                self._apply_arrivals()
            if task.state is not READY or task in self.held or task not in self.ready:
                return False
            del self.ready[task]
            self.occupy_locked(task)
            return True

    def occupy_locked(self, task: Task) -> None:
        """One more worker runs ``task``, taken out of the ready set by the caller (lock held)."""
        task.state = RUNNING
        task.workers += 1
        if task.workers > task.peak_workers:
            task.peak_workers = task.workers
        self.busy_workers += 1

    def release_nowait(self, task: Task, outcome: Outcome, busy_s: float = 0.0, cpu_s: float = 0.0) -> None:
        """Apply ``task``'s outcome without looking for the next task (the one-step harness)."""
        with self.lock:
            self._release_locked(task, outcome, busy_s, cpu_s)

    def _release_locked(self, task: Task, outcome: Outcome, busy_s: float, cpu_s: float) -> None:
        self.busy_workers -= 1
        task.busy_s += busy_s
        task.cpu_s += cpu_s
        task.activations += 1
        task.workers -= 1
        if task.workers:
            self._leave_shared(task, outcome)
        else:
            if task.shared:
                self.ready.pop(task, None)
            self._apply(task, outcome)
        if self.regrouping:
            self.settled.notify_all()

    def _leave_shared(self, task: Task, outcome: Outcome) -> None:
        """One of several workers leaves a task the others still run (ordered-multicore §2.2).

        Only a failure takes effect now; the last worker's outcome decides the task's state.
        """
        if type(outcome) is Failed:
            self._record_failure(*named_failure(task, outcome))
        elif task not in self.ready and task.shareable():
            self.ready[task] = next_stamp()
            if self.idle_workers:
                self.cond.notify()

    def _next_locked(self, worker: Worker, block: bool = True) -> Task | None:
        if worker.own is not None:  # the dedicated model: this worker runs its one operator only
            return next_own(self, worker, block)
        if self.per_worker is not None:  # a worker's own list (Haren's T_E); the lock held, as here
            return self.per_worker.next_task(self, worker, block)
        while True:
            if worker.retiring or self.finished.is_set():
                return None
            now = self.fire_due(self.now())
            if self.arrivals:
                self._apply_arrivals()
            woken = self.poller.take_ready(now)  # the workers' look while all are busy (runtime.poller)
            if woken:
                self._wake_externals(woken)
            ready = self.ready
            if ready:
                try:
                    task = ((self.urgent and self._urgent_ready(ready)) or self.policy.pick(ready, now)
                            if len(ready) > 1 else next(iter(ready)))
                except Exception as exc:  # noqa: BLE001 - a broken policy stops the flow, named (policies.failures)
                    self.policy = after_failure(self.policy, "pick", exc, self._record_failure)
                    continue
                del ready[task]
                if self.held and task in self.held:
                    continue                      # a reconfiguration holds it (runtime.refuse)
                if task.state is RUNNING and not task.shareable():
                    continue                      # a shared task another worker filled meanwhile
                self.occupy_locked(task)          # or joins the workers of a shared task
                if task.shared and task.shareable():
                    ready[task] = next_stamp()    # room for one more worker: stay eligible (§2.2)
                if self.backoff is not None:
                    worker.backoff_s = self.backoff[0]
                return task
            if self._wake_externals(self.poller.take_ready(now, force=True)):
                continue
            if not block:
                return None
            wake = self._timers[0][0] if self._timers else now + 1.0
            if self.backoff is not None:          # IBM Fig. 4: no one wakes an idle worker; it looks again
                wake = min(wake, now + worker.backoff_s)
                worker.backoff_s = min(worker.backoff_s * 10, self.backoff[1])
            # The periodic call wakes one idle worker, and only while no worker is busy (a busy one makes
            # the call at its next dispatch): each wake-up would take the GIL from a computing worker.
            keeps_periodic = self._periodic_keeper is None and self.busy_workers == 0
            if keeps_periodic:
                self._periodic_keeper = worker
                wake = min(wake, self._next_periodic)
            self.idle_workers += 1
            self.poller.worker_idle()
            t0 = self.now()
            self.cond.wait(max(0.0, wake - t0))
            worker.idle_s += self.now() - t0
            self.idle_workers -= 1
            if keeps_periodic:
                self._periodic_keeper = None

    def _urgent_ready(self, ready: dict) -> Task | None:
        """The first READY task of :attr:`urgent`, if any (a few ring senders at most: no index needed)."""
        for task in self.urgent:
            if task in ready:
                return task
        return None

    def _apply(self, task: Task, outcome: Outcome) -> None:
        if outcome is PREEMPT or outcome is LEAVE:
            self._make_ready(task)
        elif type(outcome) is ReadWait:
            self._mark_read_blocked(task, outcome)
        elif type(outcome) is WriteWait:
            self._mark_write_blocked(task, outcome)
        elif outcome is COMPLETED:
            self._mark_completed(task)
        elif type(outcome) is Sleep:
            self._mark_sleeping(task, outcome.until)
        elif type(outcome) is ExternalWait:
            self._mark_external_blocked(task, outcome)
        elif type(outcome) is Failed:
            self._record_failure(*named_failure(task, outcome))
            self._mark_completed(task)
        else:
            error = TypeError(f"operator {task.name!r} suspended with unknown message {outcome!r}; "
                              "operators must only await ctx/port methods")
            self._record_failure(task.name, Failed(error, ""))
            self._mark_completed(task)

    def _record_failure(self, where: str, failed: Failed) -> None:
        if self.failure is None:
            self.failure = (where, failed)
        self._request_shutdown_locked()

    def internal_error(self, where: str, failed: Failed, held: Task | None) -> None:
        """A worker failed outside any operator: stop the flow; ``held`` is the task it owned."""
        with self.lock:
            self._record_failure(where, failed)
            if held is not None and held.state is RUNNING:
                self._mark_completed(held)

    # -- Algorithm 4: markReadBlocked -------------------------------------------
    def _mark_read_blocked(self, task: Task, wait: ReadWait) -> None:
        if self.shutdown_requested or wait.cannot_block():
            self._make_ready(task)
            return
        if task.implicit_waits:
            task.disj_waits += 1  # a function operator's implicit wait: data on any input
        task.read_wait = dict(wait.spec)
        task.read_mode = wait.mode
        self._set_blocked(task, READ_BLOCKED)
        if self._read_ready(task):
            self._make_ready(task)

    # -- Algorithm 5: markWriteBlocked -------------------------------------------
    def _mark_write_blocked(self, task: Task, wait: WriteWait) -> None:
        if self.shutdown_requested:
            self._make_ready(task)
            return
        task.write_wait = wait.buffers
        for b in wait.buffers:
            b.write_waiters.add(task)
        self._set_blocked(task, WRITE_BLOCKED)
        if any(b.count < b.capacity or b.dead for b in wait.buffers):
            self._make_ready(task)

    def _mark_sleeping(self, task: Task, until: float) -> None:
        if self.shutdown_requested:
            self._make_ready(task)
            return
        self._set_blocked(task, SLEEPING)
        self._timer_seq += 1
        task.sleep_seq = self._timer_seq
        heapq.heappush(self._timers, (until, self._timer_seq, task))
        if self.idle_workers:
            self.cond.notify()  # an idle worker must recompute its wait timeout

    def _mark_external_blocked(self, task: Task, wait: ExternalWait) -> None:
        if self.shutdown_requested or wait.probe():
            self._make_ready(task)
            return
        self._set_blocked(task, WRITE_BLOCKED if wait.write else READ_BLOCKED)
        task.external_wait = True
        self.poller.register(task, wait.probe, wait.waiter)

    def wake_external(self, task: Task) -> None:
        """The poller saw ``task``'s external condition hold."""
        with self.lock:
            self._wake_externals((task,))

    def _wake_externals(self, tasks: Sequence[Task]) -> bool:
        """Make externally blocked ``tasks`` READY (the poller's or a worker's look); True if any."""
        for task in tasks:
            if task.external_wait:
                task.external_wait = False
                self._make_ready(task)
        return bool(tasks)

    # -- Algorithm 6: markCompleted ----------------------------------------------
    def _mark_completed(self, task: Task) -> None:
        if task.state is DONE:
            return
        self._leave_blocked(task)
        self.ready.pop(task, None)
        task.state = DONE
        if task.waker is not None:
            task.waker.notify()  # its dedicated worker ends with it
        self.live -= 1
        for subs in task.outputs:
            for buf in subs:
                self.publisher_ended_locked(buf)
        # Nothing will read this task's inputs again: unblock their writers
        # (C-Stream does this on shutdown; we also do it when an operator ends early).
        for buf in task.inputs:
            buf.kill()
            for writer in list(buf.write_waiters):
                self._make_ready(writer)
        if self.on_completed:
            hook = self.on_completed.pop(task, None)
            if hook is not None:
                hook()
        if self.live == 0:
            self.poller.stop_async()
            self.finished.set()
            self.cond.notify_all()

    # -- Algorithms 7 and 8 ---------------------------------------------------------
    def port_written(self, buf: PortBuffer) -> None:
        """A producer added tuples to ``buf`` whose owner looked READ_BLOCKED (Algorithm 7).

        With ``arrivals`` (lockless wake-ups) the producer only queues ``buf`` (deque.append is atomic
        under the GIL) and the next pick applies it: a stale one finds its owner no longer blocked.
        A dedicated worker's task (its own waker) is always woken at once.
        """
        arrivals = self.arrivals
        if arrivals is not None and buf.owner.waker is None:
            arrivals.append(buf)
            return
        with self.lock:
            self._port_written_locked(buf)

    def _apply_arrivals(self) -> None:
        """Apply the wake-ups producers queued without the lock (lock held)."""
        arrivals = self.arrivals
        while arrivals:
            self._port_written_locked(arrivals.popleft())

    def _port_written_locked(self, buf: PortBuffer) -> None:
        task = buf.owner
        if task.state is not READ_BLOCKED:
            return
        need = task.read_wait.get(buf)
        if need is None or buf.count < need:
            return
        if task.read_mode is WaitMode.DISJ or self._read_ready(task):
            self._make_ready(task)
        else:
            # Partly satisfied: counts only grow while the owner is blocked.
            del task.read_wait[buf]

    def port_read(self, buf: PortBuffer) -> None:
        """The consumer made space in ``buf`` while writers were blocked on it (Algorithm 8)."""
        with self.lock:
            if buf.count < buf.capacity:
                for writer in list(buf.write_waiters):
                    self._make_ready(writer)

    # -- shutdown --------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Ask every operator to stop; blocked ones are woken so they can see it."""
        with self.lock:
            self._request_shutdown_locked()

    def _request_shutdown_locked(self) -> None:
        if self.shutdown_requested:
            return
        self.shutdown_requested = True
        self.shutdown_time = self.now()
        for t in self.tasks:
            if t.state in (READ_BLOCKED, WRITE_BLOCKED, SLEEPING):
                self._make_ready(t)
        self.cond.notify_all()
        self.settled.notify_all()

    def past_shutdown_grace(self) -> bool:
        """True once operators have had ``shutdown_grace_s`` to notice a shutdown."""
        return self.shutdown_requested and self.now() - self.shutdown_time > self.shutdown_grace_s

    def wake_all(self) -> None:
        """Wake idle workers (used when workers are retired or added)."""
        with self.lock:
            self.cond.notify_all()

    # -- helpers (lock held) ------------------------------------------------------------
    def _read_ready(self, task: Task) -> bool:
        spec = task.read_wait
        if task.read_mode is WaitMode.CONJ:
            return all(b.count >= c for b, c in spec.items())
        return any(b.count >= c for b, c in spec.items())

    def _set_blocked(self, task: Task, state: OperatorState) -> None:
        task.state = state
        task.blocked_since = self.now()

    def _leave_blocked(self, task: Task) -> None:
        if task.external_wait:
            task.external_wait = False
            self.poller.forget(task)
        state = task.state
        if state is READ_BLOCKED or state is SLEEPING:  # waiting for its time is waiting for input
            task.read_blocked_s += self.now() - task.blocked_since
            task.read_wait = {}
        elif state is WRITE_BLOCKED:
            task.write_blocked_s += self.now() - task.blocked_since
            for b in task.write_wait:
                b.write_waiters.discard(task)
            task.write_wait = ()

    def _make_ready(self, task: Task) -> None:
        state = task.state
        if state is READY or state is DONE:
            return
        if state is not RUNNING:
            self._leave_blocked(task)
        task.state = READY
        self.ready[task] = next_stamp()
        if task.waker is not None:
            task.waker.notify()           # its dedicated worker (runtime.dedicated)
        elif self.idle_workers and self.backoff is None:
            self.cond.notify()
