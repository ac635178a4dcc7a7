"""First-Come-First-Serve (Haren §7.2; Bender et al.): the earliest head clock time runs first.

``g(op) = (-l_H,)``: the operator whose oldest queued tuple left its source earliest has the highest
priority, which minimises the maximum latency. An operator with nothing queued has the lowest.
"""

from __future__ import annotations

from elastream.policies.haren.features import FeatureTable
from elastream.policies.haren.operators import OperatorView
from elastream.policies.haren.registry import register_haren


def fcfs_priority(op: OperatorView, features: FeatureTable) -> tuple[float]:
    """``(-head clock time,)``: earlier tuples first."""
    return (-features["head_clock_time"][op.index],)


register_haren("fcfs", g=fcfs_priority, features=("head_clock_time",),
               description="FCFS: the earliest head clock time first (minimises max latency).")
