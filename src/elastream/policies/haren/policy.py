"""The Haren framework as a scheduling policy of the engine: ``Runner(policy="haren:<name>")``.

A :class:`HarenPolicy` carries one :class:`~elastream.policies.haren.spec.HarenSpec` (``f``, ``g``,
features, P, b, d) and declares what the engine must do for it:

* ``per_worker = True``: the scheduler hands each worker's look for work to :meth:`next_task` (the
  worker's own sorted list) instead of calling ``pick``;
* ``exclusive = True``: no operator is shared between workers (the engine builds no shared tasks);
* ``fuses = False``: no fusion (every operator is scheduled on its own);
* ``tuples_per_run``: b, the engine's batch size for the run; ``quantum`` is 0 for function and
  source operators, so each execution processes one batch of at most b tuples (§5);
* ``backoff``: idle workers are not woken; they back off (§5).

Everything else — states, waits, back-pressure, termination, shutdown, failures — is the scheduler's
shared mechanism, as for every other policy. ``pick`` exists for callers outside a run (it returns
the first ready operator).

Example::

    es.Runner(threads=2, policy="haren:fcfs").run(flow)
    handle = es.Runner(threads=2, policy="haren:multiclass").start(flow)
    handle.policy.statistics()      # HarenStats: the scheduling task's overhead per phase

Threading: :meth:`bind` runs on the user's thread before the workers start; :meth:`next_task` on
worker threads with the scheduler's lock held.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from typing import Any, ClassVar

from elastream.policies.base import BasePolicy
from elastream.policies.haren import execution_task
from elastream.policies.haren.scheduling_task import record_failure, scheduling_task
from elastream.policies.haren.spec import COROUTINE_QUANTUM_S, HarenSpec
from elastream.policies.haren.state import HarenState, HarenStats

#: First back-off sleep of an idle worker (s); it doubles up to execution_task.MAX_BACKOFF_S.
FIRST_BACKOFF_S = 0.0005


class HarenPolicy(BasePolicy):
    """A Haren policy (``f`` and ``g`` over features) run by Haren's execution and scheduling tasks."""

    spec: ClassVar[HarenSpec]
    per_worker: ClassVar[bool] = True
    exclusive: ClassVar[bool] = True
    fuses: ClassVar[bool] = False
    backoff: ClassVar[tuple[float, float]] = (FIRST_BACKOFF_S, execution_task.MAX_BACKOFF_S)

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self.seed = seed
        self.state: HarenState | None = None
        self.failed: str | None = None
        self._tags: dict[str, tuple[str, str]] = {}
        self._members: set[Hashable] = set()

    @property
    def tuples_per_run(self) -> int:
        """b: the most tuples one execution of an operator processes."""
        return self.spec.batch_size

    # -- engine hooks -----------------------------------------------------------------
    def bind(self, flow: Any, threads: int) -> None:
        """Read the flow's query tags and expect ``threads`` workers (indices 0 .. threads-1) at the barrier.

        A new run starts afresh (an instance passed to two runs keeps the last one's statistics until then).
        """
        self.state, self.failed = None, None
        tags = getattr(flow, "query_tags", None)
        self._tags = dict(tags) if tags else {}
        self._members = set(range(threads))

    def quantum(self, task: Any, default: float) -> float:
        """0 for a function or source operator (one batch of b tuples); a short budget for a coroutine."""
        return 0.0 if task.implicit_waits else COROUTINE_QUANTUM_S

    def pick(self, ready: Collection[Any], now: float) -> Any:
        return next(iter(ready))

    def next_task(self, sched: Any, worker: Any, block: bool = True) -> Any:
        """``worker``'s next task from its own list (lock held); None when the worker must end."""
        state = self.state or self._start(sched)
        key = getattr(worker, "index", 0)
        slot = state.slot(key, sched.now(), FIRST_BACKOFF_S)
        try:
            return self._next_of(state, slot, sched, worker, block)
        except BaseException:
            self._leave(state, slot, sched)  # a worker that dies must not hold the others at the barrier
            raise

    def _next_of(self, state: HarenState, slot: Any, sched: Any, worker: Any, block: bool) -> Any:
        period = self.spec.period_s
        while True:
            if worker.retiring or sched.finished.is_set():
                self._leave(state, slot, sched)
                return None
            now = sched.fire_due(sched.now())
            if now - slot.t_y >= period:
                self._run_scheduling_task(state, slot, sched)
                continue
            view = execution_task.pick(state, slot, sched.ready, sched.held)
            if view is not None:
                return self._take(state, slot, sched, view, now)
            if not block:
                return None
            execution_task.idle_wait(sched, worker, slot, now, period)

    # -- helpers -------------------------------------------------------------------------
    def _start(self, sched: Any) -> HarenState:
        members = self._members or {0}
        self._now = sched.now
        self.state = HarenState(self.spec, list(sched.tasks), self._tags, members, sched.now(), self.seed)
        return self.state

    def _take(self, state: HarenState, slot: Any, sched: Any, view: Any, now: float) -> Any:
        task = view.task
        del sched.ready[task]
        sched.occupy_locked(task)
        state.last_run[view.index] = now
        slot.executed.add(view.index)
        slot.backoff_s = FIRST_BACKOFF_S
        return task

    def _run_scheduling_task(self, state: HarenState, slot: Any, sched: Any) -> None:
        """T_S with the scheduler's lock released (the barrier waits for the other workers), then the
        delayed operators (Algorithm 1, lines 16-24)."""
        sched.lock.release()
        try:
            scheduling_task(self, state, slot, sched)
        finally:
            sched.lock.acquire()
        slot.t_y = sched.now()
        slot.due = execution_task.delayed(state, slot, slot.t_y)
        slot.backoff_s = FIRST_BACKOFF_S

    def _leave(self, state: HarenState, slot: Any, sched: Any) -> None:
        if slot.ended is None:
            slot.ended = sched.now()
            state.barrier.leave(slot.key)

    def fail(self, sched: Any, hook: str, error: BaseException) -> None:
        """``f`` or ``g`` raised: stop the run naming this policy; carry on with neutral choices."""
        if self.failed is None:
            self.failed = hook
            record_failure(self, sched, hook, error)

    def statistics(self) -> HarenStats | None:
        """The scheduling task's overhead so far (None before the run started)."""
        if self.state is None:
            return None
        return self.state.statistics(self._now())
