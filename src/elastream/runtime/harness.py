"""A one-step scheduler harness: run a compiled flow without worker threads, one dispatch at a time.

For deterministic tests of the mechanism (STYLE.md "Tests": injectable clock,
seeded ready-set order, "wait until all idle", a one-step API). The harness
builds the same :class:`~elastream.runtime.scheduler.Scheduler` a
:class:`~elastream.runtime.runner.RunHandle` builds, over the tasks of
:func:`~elastream.runtime.compile.compile_flow`, and plays the part of a single
worker from the test's own thread:

* :meth:`SchedulerHarness.step` — acquire one READY task (due timers first),
  run it once until its deadline (``clock.now() + quantum_s``), release its
  outcome; returns a :class:`Step` record, or None when nothing is READY.
* :meth:`SchedulerHarness.run_until_idle` — step until no task is READY
  ("wait until all idle"): every operator is blocked, sleeping or completed.
* :meth:`SchedulerHarness.run` — to the end of the flow, moving a
  :class:`~elastream.runtime.clock.ManualClock` straight to the next timer
  whenever all are idle; a flow that can make no progress (nothing READY, no
  timer, not finished) raises :class:`StuckError` with every operator's state
  instead of hanging.

Order: the policy picks among the READY tasks as in a run. With ``seed``, the
ready set is shuffled (seeded) before every pick, so ties — frequent under a
manual clock, which leaves ``last_scheduled`` equal — are broken differently
per seed and a test can explore several interleavings reproducibly.

Time: the default clock is a ``ManualClock(0.0)``. The preemption checks of
coroutine operators read it (through their :class:`~elastream.runtime.context.Context`),
so a ``quantum_s`` of 0 (the default) preempts them at their first push or
satisfied wait, and a positive one lets them run until they block. Function and
source tasks still compare their deadline with ``time.perf_counter``
(:mod:`elastream.runtime.task` does not take a clock yet): under a manual clock
near 0 their deadline has always passed, so they process one batch per step.

Threading: everything runs in the calling thread; the harness is not for use
from several threads. Only an operator waiting on another process
(``ctx.wait_external``) starts a thread, the scheduler's poller, which
:meth:`SchedulerHarness.close` joins.

Example::

    >>> import elastream as es
    >>> flow = es.Flow("doc")
    >>> _ = flow.source(range(5), name="src").map(lambda x: x * 10, name="m").sink(es.ops.Collect(), name="out")
    >>> with SchedulerHarness(flow, max_queue_size=2, batch_size=2) as h:
    ...     h.step().task
    ...     h.run().outputs["out"]
    'src'
    [0, 10, 20, 30, 40]
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from elastream.errors import ElastreamError
from elastream.graph.flow import Flow
from elastream.policies.failures import run_error
from elastream.policies.registry import create as create_policy
from elastream.runtime.clock import Clock, ManualClock
from elastream.runtime.compile import compile_flow
from elastream.runtime.ready import reorder
from elastream.runtime.scheduler import Scheduler
from elastream.runtime.task import Task
from elastream.runtime.traps import Outcome
from elastream.runtime.workers import dispatch

__all__ = ["HarnessResult", "SchedulerHarness", "Step", "StuckError"]

#: Steps after which run_until_idle / run give up: a flow that never becomes idle is livelocked.
MAX_STEPS = 1_000_000


class StuckError(ElastreamError):
    """The flow can make no progress (or exceeded its step budget); ``states`` maps operator → state."""

    def __init__(self, message: str, states: dict[str, str]):
        super().__init__(f"{message}; operator states: {states}")
        self.states = states


@dataclass(frozen=True, slots=True)
class Step:
    """One dispatch: which task ran, at which clock time, and the outcome it returned."""

    task: str
    now: float
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class HarnessResult:
    """What :meth:`SchedulerHarness.run` returns."""

    outputs: dict[str, Any]
    """Sink results by operator name, as in :class:`~elastream.runtime.runner.RunResult`."""
    steps: int
    """Dispatches made by this call."""
    now: float
    """The clock's time at the end."""


class _StepWorker:
    """What the scheduler reads of a worker: never retiring; idle time is not measured here."""

    __slots__ = ("idle_s", "retiring", "index", "backoff_s")
    own = None  # any task (the dedicated model binds real workers only)

    def __init__(self) -> None:
        self.idle_s = 0.0
        self.backoff_s = 0.0
        self.retiring = False
        self.index = 0


class SchedulerHarness:
    """Steps the scheduler of one compiled flow from the calling thread (see the module docstring)."""

    def __init__(self, flow: Flow, *, policy: Any = "least_recently_run", seed: int | None = None,
                 max_queue_size: int = 1024, batch_size: int = 256, quantum_s: float = 0.0,
                 clock: Clock | None = None, shutdown_grace_s: float = 1.0):
        compiled = compile_flow(flow, max_queue_size=max_queue_size, batch_size=batch_size, threads=1)
        self.flow = flow
        self.clock: Clock = ManualClock() if clock is None else clock
        self.policy = create_policy(policy, seed=seed)
        self.sched = Scheduler(compiled.tasks, self.policy, shutdown_grace_s=shutdown_grace_s, clock=self.clock)
        self.contexts = compiled.contexts
        for ctx in self.contexts.values():
            ctx.use_clock(self.clock)
        self.tasks: dict[str, Task] = {t.name: t for t in compiled.tasks}
        self.quantum_s = quantum_s
        self._rng = None if seed is None else random.Random(seed)
        self._worker = _StepWorker()
        self._quantum = getattr(self.policy, "quantum", None)
        self.steps = 0
        self.history: list[Step] = []

    # -- stepping ------------------------------------------------------------------------
    def step(self) -> Step | None:
        """Run one READY task once (due timers fire first); None when no task is READY."""
        sched = self.sched
        if self._rng is not None:
            self._shuffle_ready()
        task = sched.acquire_nowait(self._worker)  # type: ignore[arg-type]
        if task is None:
            return None
        now = self.clock.now()
        task.last_scheduled = now
        budget = self._quantum(task, self.quantum_s) if self._quantum else self.quantum_s
        outcome = dispatch(sched, task, self.contexts, now + budget)
        sched.release_nowait(task, outcome)
        self.steps += 1
        record = Step(task.name, now, outcome)
        self.history.append(record)
        return record

    def run_until_idle(self, max_steps: int = MAX_STEPS) -> int:
        """Step until no task is READY; return the number of steps. StuckError after ``max_steps``."""
        for n in range(max_steps):
            if self.step() is None:
                return n
        raise StuckError(f"still busy after {max_steps} steps (livelock?)", self.states())

    def run(self, max_steps: int = MAX_STEPS) -> HarnessResult:
        """Step to the end of the flow, jumping a manual clock to the next timer whenever all are idle.

        Raises :class:`~elastream.errors.OperatorError` if an operator failed, and
        :class:`StuckError` if the flow cannot progress (a lost wake-up shows up here).
        """
        start = self.steps
        while not self.finished:
            self.run_until_idle(max_steps - (self.steps - start))
            if self.finished:
                break
            due = self.sched.next_timer()
            if due is None:
                raise StuckError("no operator is READY, none sleeps, and the flow has not finished", self.states())
            if isinstance(self.clock, ManualClock):
                self.clock.set(due)
            else:  # a real clock: the timer comes due by itself
                time.sleep(max(0.0, due - self.clock.now()))
        failure = self.sched.failure
        if failure is not None:
            where, failed = failure
            raise run_error(where, failed) from failed.error  # a policy's failure names the policy
        return HarnessResult(self.outputs(), self.steps - start, self.clock.now())

    def _shuffle_ready(self) -> None:
        sched = self.sched
        with sched.lock:
            order = list(sched.ready)
            if len(order) > 1:
                self._rng.shuffle(order)  # type: ignore[union-attr]
                reorder(sched.ready, order)  # a policy's index sees them arrive in this order (its ties)

    # -- observation -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once every operator has completed."""
        return self.sched.finished.is_set()

    def states(self) -> dict[str, str]:
        """Operator name → scheduling state name (``ready``, ``read_blocked``, ...)."""
        return {t.name: t.state.value for t in self.sched.tasks}

    def ready(self) -> list[str]:
        """Names of the READY tasks, in the ready set's current order."""
        with self.sched.lock:
            return [t.name for t in self.sched.ready]

    def outputs(self) -> dict[str, Any]:
        """Sink results so far by operator name (e.g. the list a Collect gathered)."""
        out = {}
        for name, task in self.tasks.items():
            value = task.op.result()
            if value is not None:
                out[name] = value
        return out

    # -- end -------------------------------------------------------------------------------------
    def close(self) -> None:
        """End an unfinished flow as a shutdown does (blocked operators woken, coroutines closed); stop the poller."""
        if not self.finished:
            self.sched.request_shutdown()
            try:
                self.run_until_idle(10_000)
            except StuckError:
                pass
        try:
            for task in self.tasks.values():
                if task.opened:  # only when the flow was stuck even after the shutdown
                    task.abandon()
                    task.close()
        finally:
            self.sched.poller.stop()

    def __enter__(self) -> SchedulerHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
