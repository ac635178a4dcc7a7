"""MaxRunningTimeScheduling (C-Stream §3.2.6): the operator that can run the
longest without blocking, estimated as the minimum of how long it can read
(queued tuples / read rate) and how long it can write (free downstream space /
write rate). Rates come from the monitor's recent samples.

Per period: the estimate moves while an operator waits, so a pick follows the
estimate made when the operator became READY, and every READY operator is
re-estimated once per period (:mod:`elastream.policies.ready_index`); a pick is
O(log n), not a scan of the ready set.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register

_UNKNOWN_RATE = 1e-9  # no sample yet: assume slow, so the estimate is long


@register("max_running_time")
class MaxRunningTimePolicy(IndexedPolicy):
    """Longest estimated uninterrupted run wins; ties at random."""

    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> tuple[float, float]:
        return (-running_time_estimate(task), self.rng.random())


def running_time_estimate(task) -> float:
    """Seconds ``task`` could run before its inputs empty or its outputs fill."""
    read_s = float("inf") if task.is_source else task.queued / max(task.read_rate, _UNKNOWN_RATE)
    free = task.free_downstream()
    write_s = float("inf") if free < 0 else free / max(task.write_rate, _UNKNOWN_RATE)
    est = min(read_s, write_s)
    return est if est != float("inf") else 1e18
