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
        """One pass over ``ready``: the latest in pipeline order with input, else the latest."""
        old = self.starving(ready, now)
        if old is not None:
            return old
        latest = with_input = None
        latest_key = input_key = (_BEFORE_ALL, _BEFORE_ALL)
        for t in ready:
            key = (t.position, t.index)
            if key > latest_key:
                latest, latest_key = t, key
            if key > input_key and t.queued > 0:
                with_input, input_key = t, key
        return with_input if with_input is not None else latest


_BEFORE_ALL = float("-inf")  # a pipeline position before every operator's
