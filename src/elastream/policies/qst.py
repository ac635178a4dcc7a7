"""Queue-size throttling (ordered-multicore §6.1): push tuples from ingress to egress.

Picks the earliest operator in the pipeline whose output queue is below its
threshold T_i = C × cs_i / Σ cs (eq. 1), where cs_i is the cumulative
selectivity since ingress and C the capacity of the system. When every ready
operator is throttled, the earliest one runs anyway (it will block on a full
buffer rather than starve the flow).
"""

from __future__ import annotations

from elastream.metrics.period import PeriodStats
from elastream.policies.base import BasePolicy
from elastream.policies.features import cumulative_selectivities
from elastream.policies.registry import register

CAPACITY = 4096  # C of eq. 1, in tuples


@register("qst")
class QueueSizeThrottlingPolicy(BasePolicy):
    """Earliest operator whose output queue is under its eq. 1 threshold."""

    capacity = CAPACITY
    wants_ticks = True

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self._cs: dict[str, float] = {}
        self._cs_total = 0.0

    def on_tick(self, stats: PeriodStats) -> None:
        """Cumulative selectivities from the period's snapshot (once a period, not per pick)."""
        self._cs = cumulative_selectivities(stats)
        self._cs_total = sum(self._cs.values())

    def pick(self, ready, now):
        """One pass over ``ready``: the earliest in pipeline order under its threshold, else the earliest.

        The same choice as sorting ``ready`` by pipeline order and taking the first under its
        threshold (keys are unique), without the sort; a threshold is read only for an operator
        earlier than the best found so far.
        """
        old = self.starving(ready, now)
        if old is not None:
            return old
        cs = self._cs
        # Before the first period every operator counts cs = 1 (nothing measured yet).
        total = self._cs_total or float(len(ready))
        capacity = self.capacity
        earliest = best = None
        earliest_key = best_key = (_AFTER_ALL, _AFTER_ALL)
        for t in ready:
            key = (t.position, t.index)
            if key < earliest_key:
                earliest, earliest_key = t, key
            if key < best_key and t.output_queued() < capacity * cs.get(t.name, 1.0) / total:
                best, best_key = t, key
        return best if best is not None else earliest


_AFTER_ALL = float("inf")  # a pipeline position after every operator's
