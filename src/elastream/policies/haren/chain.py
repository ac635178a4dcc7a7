"""Chain (Haren §7.2; Babcock et al.): operators on the steepest part of their query's progress chart first.

``g(op) = (envelope slope, -l_H)``: the operators that discard the most tuples for the least work
run first, which minimises the memory queued tuples hold; among equal slopes, the earliest head
clock time (a two-dimensional vector, compared lexicographically).
"""

from __future__ import annotations

from elastream.policies.haren.features import FeatureTable
from elastream.policies.haren.operators import OperatorView
from elastream.policies.haren.rates import chain_priorities
from elastream.policies.haren.registry import register_haren


def chain_priority(op: OperatorView, features: FeatureTable) -> tuple[float, float]:
    """``(lower-envelope slope, -head clock time)``."""
    slope = chain_priorities(features.views, features)[op.index]
    return (slope, -features["head_clock_time"][op.index])


register_haren("chain", g=chain_priority, features=("cost", "selectivity", "head_clock_time"), dimensions=2,
               description="Chain: the steepest progress-chart segment first, then FCFS (minimises memory).")
