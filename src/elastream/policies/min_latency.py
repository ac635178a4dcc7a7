"""MinLatencyScheduling (C-Stream §3.2.6): the operator whose front tuple is
oldest by its *origin* timestamp (when it entered the flow); sources compete
with their last scheduled time.

A pick reads the head of a heap keyed when the operator became READY
(:mod:`elastream.policies.ready_index`): its front tuple does not change while it
waits, so the order is exact; the head's key is re-read before it is taken. One
READY with an empty input ranks last until a tuple that arrived since is seen at
the next period's re-key.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register


@register("min_latency")
class MinLatencyPolicy(IndexedPolicy):
    """Minimum front-tuple origin time wins."""

    recheck_head = True
    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> float:
        return _origin_key(task)


def _origin_key(task) -> float:
    if task.is_source:
        return task.last_scheduled
    front = task.front_times()
    return front[1] if front is not None else float("inf")
