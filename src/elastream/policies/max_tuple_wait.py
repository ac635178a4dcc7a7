"""MaxTupleWaitScheduling (C-Stream §5.1): the operator whose front tuple has
waited longest in its input buffer (by enqueue time); sources compete with
their last scheduled time."""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register


@register("max_tuple_wait")
class MaxTupleWaitPolicy(BasePolicy):
    """Longest-waiting front tuple wins."""

    def pick(self, ready, now):
        return min(ready, key=_enqueue_key)


def _enqueue_key(task) -> float:
    if task.is_source:
        return task.last_scheduled
    front = task.front_times()
    return front[0] if front is not None else float("inf")
