"""Worker threads and the elastic pool (C-Stream §3.1, §4.1; IBM Streams §4.1).

Any worker may resume any operator: a coroutine is resumed with ``send`` from
whichever thread the scheduler hands it to. The pool can grow and shrink while
a flow runs; a retiring worker leaves through the same path as shutdown (it
finds ``retiring`` set when it next asks for work and exits, never while it
holds an operator).

Time comes from the scheduler's clock (``sched.now``, see
:mod:`elastream.runtime.clock`): dispatch deadlines and busy time are on the
same clock as the timers and the operators' preemption checks. CPU time is
always the thread's own (``thread_time``).
"""

from __future__ import annotations

import threading
import time
import traceback
from time import perf_counter, thread_time
from typing import TYPE_CHECKING

from elastream.errors import operator_traceback
from elastream.policies.failures import report_quantum_failure
from elastream.runtime.reschedule import RescheduleStats, push_through
from elastream.runtime.traps import COMPLETED, Failed, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task


class Worker:
    """One worker thread and its utilisation counters."""

    #: The one task this worker runs under the dedicated model (runtime.dedicated); None: any task.
    own: Task | None = None
    #: Its next idle wait when the policy backs off (IBM Streams §4.1.3; see Scheduler.backoff).
    backoff_s = 0.0
    #: Set when it may start looking for work (None: at once); see WorkerPool.start_dedicated.
    gate: threading.Event | None = None
    reschedule: RescheduleStats

    def __init__(self, pool: WorkerPool, index: int):
        self.pool = pool
        self.index = index
        self.retiring = False
        self.busy_s = 0.0
        self.cpu_s = 0.0
        self.idle_s = 0.0
        self.dispatches = 0
        self.reschedule = RescheduleStats()
        self.started = pool.sched.now()
        self.ended: float | None = None
        #: (task, start, thread CPU at start) of the activation running now, read by snapshots from other
        #: threads (one assignment, so read whole); None between activations.
        self.active: tuple[Task, float, float] | None = None
        self._cpu_clock: int | None = None  # this thread's CPU clock, readable from other threads
        self.thread = threading.Thread(target=self._loop, name=f"elastream-worker-{index}", daemon=True)

    def _loop(self) -> None:
        sched = self.pool.sched
        now = sched.now
        contexts = self.pool.contexts
        quantum = self.pool.quantum_s
        policy_quantum = getattr(sched.policy, "quantum", None)
        fraction = getattr(sched.policy, "reschedule_fraction", None)  # IBM Fig. 5 (runtime.reschedule)
        task = None
        try:
            self._cpu_clock = _own_cpu_clock()
            if self.gate is not None:
                self.gate.wait()
            task = sched.acquire(self)
            while task is not None:
                t0 = now()
                c0 = thread_time()
                self.active = (task, t0, c0)
                task.last_scheduled = t0
                try:
                    budget = policy_quantum(task, quantum) if policy_quantum else quantum
                except Exception as exc:  # noqa: BLE001 - a broken policy stops the flow, named (policies.failures)
                    report_quantum_failure(sched, exc)
                    policy_quantum, budget = None, quantum
                outcome = dispatch(sched, task, contexts, t0 + budget)
                if fraction is not None and type(outcome) is WriteWait:
                    outcome = push_through(sched, self, task, outcome, contexts, t0 + budget, fraction, dispatch)
                t1 = now()
                cpu = thread_time() - c0
                self.active = None
                self.cpu_s += cpu
                self.busy_s += t1 - t0
                self.dispatches += 1
                task = sched.release(self, task, outcome, t1 - t0, cpu)
        except BaseException as exc:  # noqa: BLE001 - a runtime bug must stop the flow, not hang it
            sched.internal_error(f"<worker {self.index}>", Failed(exc, traceback.format_exc()), task)
        finally:
            self.ended = sched.now()

    def in_progress(self, now: float) -> tuple[Task | None, float, float]:
        """The activation running now: its task, and the busy and CPU seconds it has taken so far.

        Snapshots add these, so a period's busy time counts an activation that spans its end
        instead of crediting all of it to the period it ends in (a 0.3 s batch of a slow operator
        left the first period of a run at zero busy, and DS2 without a reading).
        """
        active = self.active
        if active is None:
            return None, 0.0, 0.0
        task, t0, c0 = active
        cpu = 0.0
        if self._cpu_clock is not None:
            try:
                cpu = max(0.0, time.clock_gettime(self._cpu_clock) - c0)
            except OSError:  # the thread has just ended
                cpu = 0.0
        return task, max(0.0, now - t0), cpu

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self.ended is None


def _own_cpu_clock() -> int | None:
    """The calling thread's CPU-time clock id (None where the platform has none)."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return None


def dispatch(sched: Scheduler, task: Task, contexts: dict, deadline: float):
    """Run ``task`` once until ``deadline`` (opening it first, closing it when it ends); return its outcome.

    What a worker does between ``acquire`` and ``release``, with every exception
    turned into a :class:`Failed` outcome; the one-step harness calls it too.
    """
    try:
        if not task.opened:
            if sched.shutdown_requested:
                task.abandon()
                return COMPLETED
            context = contexts[task.name]
            if context.clock is not sched.clock:
                context.use_clock(sched.clock)
            task.open(context)
        outcome = task.run(deadline)
    except BaseException as exc:  # noqa: BLE001 - reported with the operator's name
        outcome = Failed(exc, operator_traceback(exc))
    if outcome is COMPLETED or type(outcome) is Failed:
        if type(outcome) is Failed or sched.shutdown_requested:
            _quietly(task.abandon)
        try:
            task.close()
        except BaseException as exc:  # noqa: BLE001
            if type(outcome) is not Failed:
                outcome = Failed(exc, operator_traceback(exc))
    return outcome


def _quietly(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - cleanup after a failure must not mask it
        pass


class WorkerPool:
    """The set of worker threads serving one scheduler."""

    def __init__(self, sched: Scheduler, contexts: dict, quantum_s: float):
        self.sched = sched
        self.contexts = contexts
        self.quantum_s = quantum_s
        self.workers: list[Worker] = []
        self.target = 0
        self._lock = threading.Lock()
        self._next_index = 0

    def start(self, n: int) -> None:
        """Start ``n`` workers."""
        self.resize(n)

    def resize(self, n: int) -> int:
        """Set the number of active workers to ``n`` (>= 1); return the new count."""
        if n < 1:
            raise ValueError("a flow needs at least one worker thread")
        with self._lock:
            if self.sched.finished.is_set():  # the run is being gathered: join() must see every worker
                return sum(1 for w in self.workers if w.alive and not w.retiring)
            self.target = n
            active = [w for w in self.workers if w.alive and not w.retiring]
            for w in active[n:]:
                w.retiring = True
            for _ in range(n - len(active)):
                w = Worker(self, self._next_index)
                self._next_index += 1
                w.thread.start()  # started before it is listed: join() on another thread may run meanwhile
                self.workers.append(w)
        self.sched.wake_all()
        return n

    def start_dedicated(self, tasks: list[Task]) -> int:
        """Start one worker per task, each running only its own (the dedicated model); return the count.

        The workers wait at a gate until all have started: a thread's start waits for it to take the GIL,
        and with the flow already running on the first ones, 1,000 starts took a minute (19 ms each).
        """
        from elastream.runtime.dedicated import bind

        gate = threading.Event()
        with self._lock:
            try:
                for task in tasks:
                    bind(self.sched, task)
                    w = Worker(self, self._next_index)
                    w.own, w.gate = task, gate
                    w.thread.name = f"elastream-{task.name}"[:60]
                    self._next_index += 1
                    w.thread.start()
                    self.workers.append(w)
            finally:
                gate.set()
            self.target = len(tasks)
        return len(tasks)

    @property
    def active(self) -> int:
        """Workers running and not retiring."""
        return sum(1 for w in self.workers if w.alive and not w.retiring)

    def join(self, timeout: float | None = None) -> bool:
        """Join every worker thread; True when all have ended."""
        deadline = None if timeout is None else perf_counter() + timeout
        with self._lock:  # an elastic controller may be resizing the pool from its own thread
            workers = list(self.workers)
        for w in workers:
            remaining = None if deadline is None else max(0.0, deadline - perf_counter())
            w.thread.join(remaining)
        return all(not w.thread.is_alive() for w in self.workers)
