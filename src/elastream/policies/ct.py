"""Current throughput (ordered-multicore §6.4): the operator with the lowest effective throughput.

n_i = (T_i + w_i × s) / (c_i × cs_i) (eq. 3): T_i the worker time spent on the
operator in the current window, w_i its workers now, s the time slice,
c_i its cost per tuple and cs_i its cumulative selectivity. Windows are the
monitor's periods: ``on_tick`` starts a new one and reads the cumulative
selectivities from the period's statistics snapshot.

Per period: an operator's n_i is computed when it becomes READY (T_i does not
grow while it waits) and for every READY operator when a window opens; a pick
reads the head of a heap by n_i (:mod:`elastream.policies.ready_index`):
O(log n), not a scan.
"""

from __future__ import annotations

from elastream.metrics.period import PeriodStats
from elastream.policies.features import cumulative_selectivities
from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register

UNMEASURED_COST = 1e-6
TIME_SLICE_S = 0.05  # s of eq. 3: the runner's default quantum


@register("ct")
class CurrentThroughputPolicy(IndexedPolicy):
    """Lowest eq. 3 throughput wins (the likely bottleneck)."""

    wants_ticks = True
    ages = True

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        self._window_start: dict[str, float] = {}
        self._pending_window = False
        self._cs: dict[str, float] = {}

    def on_tick(self, stats: PeriodStats) -> None:
        self._cs = cumulative_selectivities(stats)
        self._pending_window = True  # the next pick snapshots busy times: a new window
        self.period += 1

    def rekeying(self, ready) -> None:
        if self._pending_window or not self._window_start:
            # The window opens on the ready operators; one that becomes ready later starts at its own time.
            self._window_start = {t.name: t.busy_s for t in ready}
            self._pending_window = False

    def index_key(self, task) -> float:
        return self.effective_tuples(task, self._cs.get(task.name, 1.0))

    def effective_tuples(self, task, cs: float) -> float:
        """n_i^w of eq. 3."""
        spent = task.busy_s - self._window_start.get(task.name, task.busy_s)
        cost = task.cost_per_tuple or UNMEASURED_COST
        return (spent + task.workers * TIME_SLICE_S) / (cost * max(cs, 1e-9))
