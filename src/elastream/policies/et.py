"""Estimated time (ordered-multicore §6.3): the operator whose worklist needs most worker time.

Priority p_i = I_i × c_i / (w_i + 1) when w_i < M_i, else 0 (eq. 2): I_i the
queued tuples, c_i the measured cost per tuple, w_i the workers on it now and
M_i its maximum degree of parallelism. Sources have no worklist; they run when
no other operator has a positive priority (least recently run first).
"""

from __future__ import annotations

from elastream.policies.base import BasePolicy, last_scheduled_key
from elastream.policies.registry import register

UNMEASURED_COST = 1e-6  # seconds per tuple assumed before an operator has run


@register("et")
class EstimatedTimePolicy(BasePolicy):
    """Largest eq. 2 priority wins."""

    def pick(self, ready, now):
        old = self.starving(ready, now)
        if old is not None:
            return old
        best, top = None, 0.0
        for t in ready:
            queued = t.queued
            if not queued or t.workers >= t.max_workers:
                continue  # priority 0 never wins
            p = queued * (t.cost_per_tuple or UNMEASURED_COST) / (t.workers + 1)  # priority(t), its queue read once
            if p > top:
                best, top = t, p
        if best is not None:
            return best
        return min(ready, key=last_scheduled_key)


def priority(task) -> float:
    """Eq. 2 of ordered-multicore §6.3."""
    if task.workers >= task.max_workers:
        return 0.0
    cost = task.cost_per_tuple or UNMEASURED_COST
    return task.queued * cost / (task.workers + 1)
