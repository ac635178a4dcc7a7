"""MinLatencyScheduling (C-Stream §3.2.6): the operator whose front tuple is
oldest by its *origin* timestamp (when it entered the flow); sources compete
with their last scheduled time."""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register


@register("min_latency")
class MinLatencyPolicy(BasePolicy):
    """Minimum front-tuple origin time wins."""

    def pick(self, ready, now):
        return min(ready, key=_origin_key)


def _origin_key(task) -> float:
    if task.is_source:
        return task.last_scheduled
    front = task.front_times()
    return front[1] if front is not None else float("inf")
