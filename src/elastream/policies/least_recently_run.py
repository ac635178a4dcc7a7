"""LeastRecentlyRunScheduling: the READY operator scheduled longest ago (C-Stream §3.2.6).

Also what IBM Streams' free list approximates (§4.1.5).
"""

from __future__ import annotations

from elastream.policies.base import BasePolicy, last_scheduled_key
from elastream.policies.registry import register


@register("least_recently_run")
class LeastRecentlyRunPolicy(BasePolicy):
    """Minimum last-scheduled time wins."""

    def pick(self, ready, now):
        return min(ready, key=last_scheduled_key)

