"""Queue-size throttling (ordered-multicore §6.1): push tuples from ingress to egress.

Picks the earliest operator in the pipeline whose output queue is below its
threshold T_i = C × cs_i / Σ cs (eq. 1), where cs_i is the cumulative
selectivity since ingress and C the capacity of the system. When every ready
operator is throttled, the earliest one runs anyway (it will block on a full
buffer rather than starve the flow).
"""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.features import all_tasks, cumulative_selectivities
from elastream.policies.registry import register

CAPACITY = 4096  # C of eq. 1, in tuples


@register("qst")
class QueueSizeThrottlingPolicy(BasePolicy):
    """Earliest operator whose output queue is under its eq. 1 threshold."""

    capacity = CAPACITY

    def pick(self, ready, now):
        old = self.starving(ready, now)
        if old is not None:
            return old
        cs = cumulative_selectivities(all_tasks(ready))
        total = sum(cs.values()) or 1.0
        ordered = sorted(ready, key=_pipeline_order)
        for t in ordered:
            if t.output_queued() < self.capacity * cs[t] / total:
                return t
        return ordered[0]


def _pipeline_order(task) -> tuple[int, int]:
    return task.position, task.index
