"""Estimated time (ordered-multicore §6.3): the operator whose worklist needs most worker time.

Priority p_i = I_i × c_i / (w_i + 1) when w_i < M_i, else 0 (eq. 2): I_i the
queued tuples, c_i the measured cost per tuple, w_i the workers on it now and
M_i its maximum degree of parallelism. Sources have no worklist; they run when
no other operator has a positive priority (least recently run first).

Per period: the priority moves while an operator waits (its queue grows), so a
pick follows the priority computed when the operator became READY, and every
READY operator is re-prioritised once per period
(:mod:`elastream.policies.ready_index`); a pick is O(log n), not a scan.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register

UNMEASURED_COST = 1e-6  # seconds per tuple assumed before an operator has run


@register("et")
class EstimatedTimePolicy(IndexedPolicy):
    """Largest eq. 2 priority wins."""

    ages = True
    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> tuple[int, float]:
        p = priority(task)
        return (0, -p) if p > 0 else (1, task.last_scheduled)  # priority 0 never wins over a positive one


def priority(task) -> float:
    """Eq. 2 of ordered-multicore §6.3."""
    if task.workers >= task.max_workers:
        return 0.0
    cost = task.cost_per_tuple or UNMEASURED_COST
    return task.queued * cost / (task.workers + 1)
