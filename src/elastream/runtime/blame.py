"""Which operator a failure names: a fused chain's member, a replica's user operator, or the task itself.

Called by the scheduler when a dispatch fails (:mod:`elastream.runtime.scheduler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastream.runtime.traps import Failed

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.task import Task


def named_failure(task: Task, outcome: Failed) -> tuple[str, Failed]:
    """The operator a failure names: the member of a fused chain that raised (runtime.fusion, also when
    the chain is a replica's operator), the user's operator of a replica (the details say which
    replica), else the task's own."""
    member = getattr(task.op, "failed_member", None)
    if member is not None:
        return member, outcome
    origin = task.spec.reports_as
    member = getattr(getattr(task.op, "inner", None), "failed_member", None)  # a replica of a fused chain
    if member is not None:
        return member, Failed(outcome.error, f"in replica {task.name!r}\n{outcome.details}")
    if origin is None:
        return task.name, outcome
    return origin, Failed(outcome.error, f"in replica {task.name!r}\n{outcome.details}")
