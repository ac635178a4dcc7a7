"""Multi-class (Haren §7.4): HIGH queries before LOW ones; FCFS within HIGH, Highest Rate within LOW.

``g(op) = (class, -l_H)`` for an operator of a HIGH query and ``(class, GR)`` for a LOW one: the
first dimension puts every HIGH operator ahead (objective 1), the second minimises HIGH's maximum
latency (objective 2) and LOW's mean latency (objective 3). Queries get their class from the flow's
tags: ``flow.source(..., query="alerts", priority="high")``; an untagged query is LOW.
"""

from __future__ import annotations

from elastream.policies.haren.features import FeatureTable
from elastream.policies.haren.operators import CLASS_RANKS, OperatorView
from elastream.policies.haren.rates import global_output_rate
from elastream.policies.haren.registry import register_haren

HIGH = CLASS_RANKS["high"]


def multiclass_priority(op: OperatorView, features: FeatureTable) -> tuple[float, float]:
    """``(class rank, -head clock time)`` for HIGH, ``(class rank, global output rate)`` for LOW."""
    rank = features["priority_class"][op.index]
    if rank >= HIGH:
        return (rank, -features["head_clock_time"][op.index])
    return (rank, global_output_rate(op, features.views, features))


register_haren("multiclass", g=multiclass_priority,
               features=("priority_class", "cost", "selectivity", "head_clock_time"), dimensions=2,
               description="Multi-class: HIGH before LOW; FCFS within HIGH, Highest Rate within LOW.")
