"""Last-in-pipeline (ordered-multicore §6.2): pull tuples from the egress.

Picks the latest operator in the pipeline with a non-empty input queue; when
none has input, the latest ready operator (a source) runs.

A pick reads the head of a heap of the READY operators by (has input, pipeline
order) (:mod:`elastream.policies.ready_index`): O(log n), not a scan. Whether an
operator has input is read when it becomes READY (its queue only grows while it
waits) and for every READY operator once per period.
"""

from __future__ import annotations

from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register


@register("lp")
class LastInPipelinePolicy(IndexedPolicy):
    """Latest operator with work wins."""

    ages = True
    rekey_s = 0.1  # the default statistics period

    def index_key(self, task) -> tuple[int, float, float]:
        return (0 if task.queued > 0 else 1, -task.position, -task.index)
