"""RandomScheduling: pick uniformly at random among READY operators (C-Stream §3.2.6)."""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register


@register("random")
class RandomPolicy(BasePolicy):
    """Uniform random choice; seeded for reproducible runs."""

    def pick(self, ready, now):
        return self.rng.choice(tuple(ready))
