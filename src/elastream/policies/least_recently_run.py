"""LeastRecentlyRunScheduling: the READY operator scheduled longest ago (C-Stream §3.2.6).

Also what IBM Streams' free list approximates (§4.1.5). A pick reads the head of a heap of the
READY operators by last-scheduled time (:mod:`elastream.policies.ready_index`): O(log n)
amortised, exact (the time does not change while an operator waits, and a shared operator whose
time moved is re-read at the head).
"""

from __future__ import annotations

from elastream.policies.base import last_scheduled_key
from elastream.policies.ready_index import IndexedPolicy
from elastream.policies.registry import register


@register("least_recently_run")
class LeastRecentlyRunPolicy(IndexedPolicy):
    """Minimum last-scheduled time wins (ties: the earliest to become ready)."""

    recheck_head = True
    index_key = staticmethod(last_scheduled_key)  # type: ignore[assignment]
