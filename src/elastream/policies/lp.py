"""Last-in-pipeline (ordered-multicore §6.2): pull tuples from the egress.

Picks the latest operator in the pipeline with a non-empty input queue; when
none has input, the latest ready operator (a source) runs.
"""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register


@register("lp")
class LastInPipelinePolicy(BasePolicy):
    """Latest operator with work wins."""

    def pick(self, ready, now):
        old = self.starving(ready, now)
        if old is not None:
            return old
        with_input = [t for t in ready if t.queued > 0]
        return max(with_input or ready, key=_pipeline_order)


def _pipeline_order(task) -> tuple[int, int]:
    return task.position, task.index
