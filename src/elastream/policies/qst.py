"""Queue-size throttling (ordered-multicore §6.1): push tuples from ingress to egress.

Picks the earliest operator in the pipeline whose output queue is below its
threshold T_i = C × cs_i / Σ cs (eq. 1), where cs_i is the cumulative
selectivity since ingress and C the capacity of the system. When every ready
operator is throttled, the earliest one runs anyway (it will block on a full
buffer rather than starve the flow).

Per period: the cumulative selectivities come from each period's snapshot
(``on_tick``), and whether an operator is throttled is read when it becomes
READY and for every READY operator once per period (its output queue drains
while it waits); a pick reads the head of a heap by (throttled, pipeline order)
(:mod:`elastream.policies.ready_index`): O(log n), not a scan.
"""

from __future__ import annotations

from elastream.metrics.period import PeriodStats
from elastream.policies.features import cumulative_selectivities
from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register

CAPACITY = 4096  # C of eq. 1, in tuples


@register("qst")
class QueueSizeThrottlingPolicy(IndexedPolicy):
    """Earliest operator whose output queue is under its eq. 1 threshold."""

    capacity = CAPACITY
    wants_ticks = True
    ages = True
    rekey_s = 0.1  # the default statistics period

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self._cs: dict[str, float] = {}
        self._cs_total = 0.0
        self._ready: dict = {}  # the ready set being keyed (its size stands in for Σ cs before a period)

    def on_tick(self, stats: PeriodStats) -> None:
        """Cumulative selectivities from the period's snapshot (once a period, not per pick)."""
        cs = cumulative_selectivities(stats)
        self._cs, self._cs_total = cs, sum(cs.values())
        self.period += 1

    def rekeying(self, ready) -> None:
        self._ready = ready

    def index_key(self, task) -> tuple[int, float, float]:
        # Before the first period every operator counts cs = 1 (nothing measured yet).
        total = self._cs_total or float(max(len(self._ready), 1))
        throttled = task.output_queued() >= self.capacity * self._cs.get(task.name, 1.0) / total
        return (1 if throttled else 0, task.position, task.index)
