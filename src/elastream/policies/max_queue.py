"""MaxQueueLengthScheduling (C-Stream §3.2.6): a READY source first, else the
operator with the most queued input tuples; ties broken at random."""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register


@register("max_queue")
class MaxQueuePolicy(BasePolicy):
    """Favours throughput: drain the longest queue."""

    def pick(self, ready, now):
        sources = [t for t in ready if t.is_source]
        if sources:
            return self._tie_break(sources)
        best, most = [], -1
        for t in ready:
            q = t.queued
            if q > most:
                best, most = [t], q
            elif q == most:
                best.append(t)
        return self._tie_break(best)
