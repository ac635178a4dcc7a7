"""The tuples in flight inside a chain of tasks being regrouped (runtime.refuse): take them, and carry them.

A regroup swaps tasks only when no worker is inside them; what they hold then is
taken here, in order: a task's undelivered output (its pending output, and for a
task shared by several workers what its reorder buffer released or still holds),
and what waits in the buffers between them (:func:`take_inside`). A chain fused
into a task of one worker carries the latter in a :class:`CarryingTask`.

Threading: every function here is called by the reconfiguring thread under the
scheduler's lock, on tasks no worker is inside; a :class:`CarryingTask` runs like
any task, on one worker at a time.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from elastream.runtime.fusion import FusedChain, member_names
from elastream.runtime.task import FunctionTask
from elastream.runtime.traps import PREEMPT, Outcome, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.spec import OperatorSpec
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.task import Task


class CarryingTask(FunctionTask):
    """The one-worker task of a chain just fused: it first runs what was inside the chain then.

    ``carry`` holds ``(member, items, origin)``, oldest first: the tuples that waited between
    two of the tasks it replaced, each to run from that member on. They are older than anything
    in its input, so they leave first; after them it is a plain :class:`FunctionTask`.
    """

    def __init__(self, name: str, op: FusedChain, index: int, batch_size: int, spec: OperatorSpec,
                 carry: list[tuple[int, list, float]]):
        super().__init__(name, op, index, batch_size, spec)
        self._carry = deque(carry)

    def is_carrying(self) -> bool:
        """True while some of what it carried has not run yet."""
        return bool(self._carry)

    def run(self, deadline: float) -> Outcome:
        if self._carry:
            outcome = self._run_carry(deadline)
            if outcome is not None:
                return outcome
        return super().run(deadline)

    def _run_carry(self, deadline: float) -> Outcome | None:
        if self.sched.shutdown_requested:
            self._carry.clear()                   # a shutdown cuts the stream short, as for buffered tuples
            return None
        if self.pending and not self.flush_pending():
            return WriteWait(self.pending_buffers())
        while self._carry:
            first, items, origin = self._carry.popleft()
            self.origin = origin
            out = self.op._run_stages(items, first)  # type: ignore[attr-defined]
            if out and not self.emit(0, out, origin):
                return WriteWait(self.pending_buffers())
            if self._carry and self.now() >= deadline:
                return PREEMPT
        return None


def take_inside(old: list[Task]) -> list[tuple[int, list, float]]:
    """What waits between the old tasks (their inner buffers, then what each had not delivered), as
    ``(member offset in the chain, items, origin)``, the latest point (the oldest tuples) first."""
    offsets = [0]
    for t in old[:-1]:
        offsets.append(offsets[-1] + len(member_names(t)))
    carry = []
    for k in range(len(old) - 1, 0, -1):
        buf = old[k].inputs[0]
        items, origin = buf.take(buf.count) if buf.count else ([], 0.0)
        for _, more, more_origin in take_undelivered(old[k - 1]):
            origin = origin if items else more_origin
            items = items + more
        if items:
            carry.append((offsets[k], items, origin))
    return carry


def has_undelivered(task: Task) -> bool:
    return bool(task.pending) or (task.shared and bool(task._outbox or task._refused))  # type: ignore[attr-defined]


def release_refused(task: Any) -> bool:
    """Let a quiescent shared task's reorder buffer release every output it holds (into its outbox).

    With no worker on the task every serial it numbered has been added or refused; retrying the
    refused ones lowest first releases them all. False when something is still held back.
    """
    while task._refused:
        before = len(task._refused)
        task._retry_refused()
        if len(task._refused) == before:
            break
    return not task._refused and task._reorder.next_serial == task._serial


def take_undelivered(task: Any) -> list[list[Any]]:
    """What ``task`` produced but did not deliver, as one ``[buffer, items, origin]`` per buffer, in order.

    Its pending output first, then (a shared task) its released outbox, counted as emitted and sent now.
    """
    entries = [list(e) for e in task.pending]
    task.pending = []
    if task.shared:
        outbox = task._outbox
        while outbox:
            chunk = outbox.popleft()
            origin = getattr(chunk, "origin", task.origin)
            task.tuples_out += len(chunk)
            for buf in task.outputs[0]:
                entries.append([buf, list(chunk), origin])
                task.sent[buf] = task.sent.get(buf, 0) + len(chunk)
    merged: dict[PortBuffer, list[Any]] = {}
    for buf, items, origin in entries:
        if buf in merged:
            merged[buf][1].extend(items)
        else:
            merged[buf] = [buf, list(items), origin]
    return list(merged.values())
