"""The scheduler's hooks for changing a running flow, a part of :class:`~elastream.runtime.scheduler.Scheduler`.

A mixin, as :mod:`elastream.runtime.timers` is: the entry points that a
reconfiguration (:mod:`elastream.runtime.refuse`) and a unit's bypass
(:mod:`elastream.runtime.bypass`) call with the scheduler's one lock held. Each
names what it does to a task or port in the scheduler's own terms and leaves
the state changes to the scheduler's methods (``_make_ready``, ``_set_blocked``,
``_mark_completed``, ``_leave_blocked``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elastream.runtime.states import OperatorState
from elastream.runtime.traps import WaitMode

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.task import Task

READ_BLOCKED = OperatorState.READ_BLOCKED


class ReconfigurationHooks:
    """Make ready, close, park, complete or forget a task or port from outside a dispatch (lock held)."""

    ready: dict
    _make_ready: Any
    _set_blocked: Any
    _mark_completed: Any
    _leave_blocked: Any

    def make_ready_locked(self, task: Task) -> None:
        """Make ``task`` READY (and eligible unless held); the caller holds the lock."""
        self._make_ready(task)

    def publisher_ended_locked(self, buf: PortBuffer) -> None:
        """One publisher of ``buf`` will write no more: the last one closes it (Algorithm 6); lock held."""
        buf.open_publishers -= 1
        if buf.open_publishers == 0:
            buf.closed = True
            if buf.owner.state is READ_BLOCKED:
                self._make_ready(buf.owner)

    def park_locked(self, task: Task) -> None:
        """Leave ``task`` read-blocked on any of its inputs instead of dispatching it (runtime.bypass); lock held."""
        self.ready.pop(task, None)
        self._set_blocked(task, READ_BLOCKED)
        task.read_wait = {buf: 1 for buf in task.inputs}
        task.read_mode = WaitMode.DISJ

    def complete_locked(self, task: Task) -> None:
        """Mark ``task`` completed without running it (a bypass replaced by its unit); the caller holds the lock."""
        self._mark_completed(task)

    def forget_locked(self, task: Task) -> None:
        """Take ``task`` out of every wait and the ready set (a task being replaced); the caller holds the lock."""
        self._leave_blocked(task)
        self.ready.pop(task, None)
