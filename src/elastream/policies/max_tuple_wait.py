"""MaxTupleWaitScheduling (C-Stream §5.1): the operator whose front tuple has
waited longest in its input buffer (by enqueue time); sources compete with
their last scheduled time.

A pick reads the head of a heap keyed when the operator became READY
(:mod:`elastream.policies.ready_index`): its front tuple does not change while it
waits, so the order is exact; the head's key is re-read before it is taken. One
READY with an empty input (woken by free space downstream) ranks last until a
tuple that arrived since is seen at the next period's re-key.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register


@register("max_tuple_wait")
class MaxTupleWaitPolicy(IndexedPolicy):
    """Longest-waiting front tuple wins."""

    recheck_head = True
    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> float:
        return _enqueue_key(task)


def _enqueue_key(task) -> float:
    if task.is_source:
        return task.last_scheduled
    front = task.front_times()
    return front[0] if front is not None else float("inf")
