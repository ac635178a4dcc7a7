"""MaxQueueLengthScheduling (C-Stream §3.2.6): a READY source first, else the
operator with the most queued input tuples; ties broken at random.

Per period: queue lengths move while an operator waits, so a pick follows the
rank read when the operator became READY, and every READY operator is re-ranked
once per period (:mod:`elastream.policies.ready_index`); a pick is O(log n), not
a scan of the ready set.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register


@register("max_queue")
class MaxQueuePolicy(IndexedPolicy):
    """Favours throughput: drain the longest queue."""

    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> tuple[int, int, float]:
        tie = self.rng.random()  # ties at random, drawn when ranked
        return (0, 0, tie) if task.is_source else (1, -task.queued, tie)
