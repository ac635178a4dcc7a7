"""The threads backend: run a flow on worker threads in this process (:class:`ThreadRunHandle`).

This is the single-process engine every other backend builds on: a worker
process of a multi-process run runs its part of the flow with it too.

Example::

    handle = start_threads(flow, RunConfig(threads=2))
    handle.set_threads(4)      # elastic thread count while running
    result = handle.wait()     # RunResult

Threading model: the handle's methods are called from the user's thread; the
flow runs on the pool's worker threads (plus a monitor thread when a policy
wants ticks).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from time import perf_counter

from elastream.errors import ElastreamError
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats
from elastream.operators.base import Operator
from elastream.policies.failures import guarded_ticks, run_error
from elastream.policies.registry import create as create_policy
from elastream.runtime import gc_tuning
from elastream.runtime.bypass import Bypasses
from elastream.runtime.compile import compile_flow
from elastream.runtime.config import RunConfig
from elastream.runtime.decisions import Applied, Decision, Fuse, SetThreads, Unfuse
from elastream.runtime.fusion import member_names
from elastream.runtime.handle import RunResult, wait_slice
from elastream.runtime.monitor import Monitor
from elastream.runtime.periodic import PeriodListener, PeriodSampler
from elastream.runtime.refuse import Regrouper, RunLayout
from elastream.runtime.scheduler import DONE, Scheduler
from elastream.runtime.snapshot import take_snapshot
from elastream.runtime.workers import WorkerPool


class ThreadRunHandle:
    """A flow running on worker threads of this process (a :class:`~elastream.runtime.handle.RunHandle`)."""

    def __init__(self, flow: Flow, config: RunConfig):
        self.flow = flow
        self.config = config
        scheduling, ordering = config.scheduling, config.ordering
        self.policy = create_policy(config.policy, seed=config.seed)
        exclusive = getattr(self.policy, "exclusive", False)  # no task shared between workers (policies.ibm)
        # A Haren policy sets the tuples of one execution (b) and schedules every operator on its own.
        batch_size = getattr(self.policy, "tuples_per_run", None) or config.batch_size
        fuse = scheduling.fuse and (config.model == "manual" or
                                    (config.model != "dedicated" and getattr(self.policy, "fuses", True)))
        compiled = compile_flow(flow, max_queue_size=config.max_queue_size, batch_size=batch_size,
                                threads=1 if exclusive else config.threads, reorder=ordering.reorder,
                                partitioning=ordering.partitioning, fuse=fuse, wide=config.model == "manual")
        bind = getattr(self.policy, "bind", None)  # the flow's query tags and the workers (policies.haren)
        if bind is not None:
            bind(flow, config.threads)
        self._instances = compiled.instances  # every operator's run instance, fused chains' members too
        self.bypasses = Bypasses.install(compiled, config.bypass, config.batch_size, config.max_queue_size)
        """Held units running unreplicated until their first replica joins (:meth:`splice`)."""
        self.sched = Scheduler(compiled.tasks, self.policy, shutdown_grace_s=scheduling.shutdown_grace_s)
        self.bypasses.attach(self.sched)
        self.pool = WorkerPool(self.sched, compiled.contexts, config.quantum_ms / 1000.0)
        layout = RunLayout(flow, compiled.instances, {n: op.spec() for n, op in compiled.instances.items()},
                           config.max_queue_size, config.batch_size, ordering.reorder, ordering.partitioning)
        self._regrouper = Regrouper(self.sched, self.pool, layout, compiled.fused)  # Fuse / Unfuse while running
        self.monitor = Monitor(self.sched, scheduling.stats_period_ms / 1000.0)
        self.timeline: list[Applied] = []
        """Every decision submitted to this run, as applied (in order)."""
        self.periods = PeriodSampler(self.stats)
        """One statistics snapshot per period, for every controller that listens (:meth:`add_period_listener`)."""
        if getattr(self.policy, "wants_ticks", False):
            # Policies read the same one snapshot a period; one that raises stops the flow, named.
            self.add_period_listener(guarded_ticks(self.policy, self.sched))
        self._started = perf_counter()
        self._ended: float | None = None
        self._result: RunResult | None = None
        self._explicit_shutdown = False
        self._gc_relaxed = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        self._started = perf_counter()
        self._gc_relaxed = gc_tuning.relax(self.config.gc_threshold)
        if self.config.model == "dedicated":
            self.pool.start_dedicated(self.sched.tasks)
        else:
            self.pool.start(self.config.threads)
        self.monitor.start()

    # -- control -------------------------------------------------------------------
    def set_threads(self, n: int) -> int:
        """Change the number of worker threads while the flow runs."""
        if self.config.model != "dynamic":
            raise ValueError(f"model={self.config.model!r} fixes its threads (one per operator, or one); "
                             "only the dynamic model's pool can change size")
        return self.pool.resize(n)

    @property
    def _tasks(self) -> list:
        """The tasks running now (a regroup replaces some: runtime.refuse)."""
        return self.sched.tasks

    @property
    def fused(self) -> tuple[tuple[str, ...], ...]:
        """The chains of operators running as one task each now (member names in flow order)."""
        return self._regrouper.chains

    @property
    def threads(self) -> int:
        """Current number of active worker threads."""
        return self.pool.active

    def submit(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Apply ``decisions`` now (this backend's reconfiguration point), check them, record them."""
        applied = [self._timed_apply(d) for d in decisions]
        self.timeline.extend(applied)
        return applied

    def _timed_apply(self, decision: Decision) -> Applied:
        """``_apply``, with the time it held the run as the decision's pause (unless it measured its own)."""
        began = perf_counter()
        applied = self._apply(decision)
        if applied.pause_ms is not None:
            return applied
        return replace(applied, pause_ms=(perf_counter() - began) * 1000.0)

    def _apply(self, decision: Decision) -> Applied:
        at = perf_counter() - self._started
        if isinstance(decision, SetThreads) and decision.process == 0:
            active = self.pool.resize(decision.threads)
            ok = active == decision.threads
            # No stream waits for a thread to join or leave: the workers keep dispatching meanwhile (the pool's
            # lock is not on their path). Only the control thread waits, for a new thread's start, which needs
            # the GIL: tens of ms beside workers running pure Python, and no pause of the flow's.
            return Applied(decision, at, ok, "" if ok else f"the pool runs {active} threads", pause_ms=0.0)
        if isinstance(decision, (Fuse, Unfuse)):
            if not getattr(self.policy, "fuses", True):  # a Haren policy schedules every operator on its own
                return Applied(decision, at, False, f"policy {self.policy.name!r} runs no fused chains")
            ok, why = self._regrouper.apply(decision)
            return Applied(decision, at, ok, why)
        return Applied(decision, at, False, f"{type(decision).__name__} is not applied by the threads backend")

    def when_completed(self, name: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the task running operator ``name`` has completed (at once if it has).

        The callback runs on the worker that completed the task, under the scheduler's lock: it must
        only signal (write a byte, set an event). Nothing happens for a name no task runs.
        """
        with self.sched.lock:
            task = next((t for t in self.sched.tasks if t.name == name), None)
            if task is None:
                return
            if task.state is not DONE:
                self.sched.on_completed[task] = _both(self.sched.on_completed.get(task), callback)
                return
        callback()

    def splice(self, unit: str) -> tuple[bool, str, float]:
        """Let held unit ``unit`` run through its split, replicas and merge from now on (if it is bypassed):
        (done, why not, seconds its stream stood still)."""
        return self.bypasses.splice(unit)

    def move(self, unit: str, replica: int) -> tuple[bool, str, float]:
        """Run held unit ``unit`` whole where its replica ``replica`` runs, in another process (if it is
        bypassed): (done, why not, seconds its stream stood still)."""
        return self.bypasses.move(unit, replica)

    def bypassed(self, unit: str) -> bool:
        """True while held unit ``unit`` runs through its bypass (unreplicated, in this part)."""
        return self.bypasses.bypassed(unit)

    def moved_to(self, unit: str) -> int | None:
        """The replica that runs ``unit`` whole since :meth:`move` (None: it did not move)."""
        return self.bypasses.moved_to(unit)

    def add_period_listener(self, listener: PeriodListener) -> None:
        """Call ``listener(PeriodStats)`` once per statistics period (on the monitor thread) while the flow runs."""
        if not self.periods.has_listeners:
            self.monitor.add_hook(self.periods.tick)
        self.periods.add_listener(listener)

    def request_shutdown(self) -> None:
        """Ask the flow to stop, without waiting."""
        self._explicit_shutdown = True
        self.sched.request_shutdown()

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        """Request an explicit shutdown and wait for every worker to end."""
        self.request_shutdown()
        return self.wait(timeout)

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the flow ends; raise OperatorError if an operator failed."""
        deadline = None if timeout is None else perf_counter() + timeout
        try:
            while not self.sched.finished.wait(wait_slice(deadline)):
                if not any(w.alive for w in self.pool.workers) and not self.sched.finished.is_set():
                    if self.sched.failure is not None:
                        break  # what stopped the workers is reported by _finish, never hidden by this
                    raise ElastreamError("every worker thread exited before the flow finished")
                if deadline is not None and perf_counter() >= deadline:
                    raise TimeoutError(f"flow {self.flow.name!r} still running after {timeout} s")
        except KeyboardInterrupt:
            self.request_shutdown()
            self._finish(join_timeout=self.config.scheduling.shutdown_grace_s + 2.0)
            raise
        return self._finish(join_timeout=None if deadline is None else max(0.1, deadline - perf_counter()))

    def _finish(self, join_timeout: float | None) -> RunResult:
        with self._lock:
            if self._result is None:
                self.sched.wake_all()
                self.pool.join(join_timeout)
                if self._gc_relaxed:
                    gc_tuning.restore()
                    self._gc_relaxed = False
                self.monitor.stop()
                self.sched.poller.stop()
                self._ended = perf_counter()
                self.monitor.sample_rates()
                stats = self.stats()
                outputs = {}
                for name, op in self._instances.items():
                    value = op.result()
                    if value is not None:
                        outputs[name] = value
                self._result = RunResult(outputs=outputs, stats=stats, elapsed_s=self._ended - self._started,
                                         shutdown=self._explicit_shutdown)
        failure = self.sched.failure
        if failure is not None:
            where, failed = failure
            raise run_error(where, failed, partial=self._result) from failed.error
        return self._result

    # -- observation ------------------------------------------------------------------
    def stats(self) -> FlowStats:
        """A statistics snapshot (safe while running)."""
        return take_snapshot(self.sched, self.pool, self._started, getattr(self.policy, "name", "?"))

    @property
    def finished(self) -> threading.Event:
        """Set once every operator has completed (or the run failed or was shut down)."""
        return self.sched.finished

    def operator(self, name: str) -> Operator:
        """The running instance of operator ``name`` (its live state; the flow's own object holds none)."""
        if name in self._instances:
            return self._instances[name]
        raise KeyError(f"no operator {name!r} in flow {self.flow.name!r}")

    def allotment_statistics(self) -> dict[str, dict]:
        """Per operator run by several workers at once (dynamic allotment): its order-keeping counters."""
        return {t.name: t.statistics() for t in self.sched.tasks if t.shared}

    @property
    def done(self) -> bool:
        """True once every operator has completed."""
        return self.sched.finished.is_set()

    def states(self) -> dict[str, str]:
        """Operator name → scheduling state."""
        return {name: t.state.value for t in self.sched.tasks for name in member_names(t)}


def start_threads(flow: Flow, config: RunConfig) -> ThreadRunHandle:
    """Compile ``flow`` and start it on ``config.threads`` worker threads; return its handle at once."""
    handle = ThreadRunHandle(flow, config)
    handle._start()
    return handle


def _both(first: Callable[[], None] | None, then: Callable[[], None]) -> Callable[[], None]:
    """``then`` after ``first`` (when there is one): several hooks on one task's completion."""
    if first is None:
        return then

    def both() -> None:
        first()
        then()
    return both
