"""Highest Rate (Haren §7.2; Sharaf et al.): the highest global output rate runs first.

``g(op) = (GR,)`` with GR the egress tuples that running the operator and all its downstream
operators would produce per second of work: productive (high selectivity) and cheap operators first,
which minimises the mean latency.
"""

from __future__ import annotations

from elastream.policies.haren.features import FeatureTable
from elastream.policies.haren.operators import OperatorView
from elastream.policies.haren.rates import global_output_rate
from elastream.policies.haren.registry import register_haren


def hr_priority(op: OperatorView, features: FeatureTable) -> tuple[float]:
    """``(global output rate,)``: the most egress per second of work first."""
    return (global_output_rate(op, features.views, features),)

register_haren("hr", g=hr_priority, features=("cost", "selectivity"),
               description="Highest Rate: the highest global output rate first (minimises mean latency).")
