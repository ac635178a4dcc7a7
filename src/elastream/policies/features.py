"""Derived operator features shared by the ordered-multicore §6 heuristics.

Graph-wide features (cumulative selectivity) come from the per-period
statistics snapshot (:class:`~elastream.metrics.period.PeriodStats`), computed
once a period in ``on_tick``, so no policy walks the graph per pick. Pure
functions; called on the monitor thread.
"""

from __future__ import annotations

from elastream.metrics.period import PeriodStats


def cumulative_selectivities(period: PeriodStats) -> dict[str, float]:
    """cs_i = s_i × cs of the upstream (the product since ingress, §6.1 eq. 1), by operator name.

    The edges are the period's traffic (``sent``); an operator with several publishers takes their
    mean, so a linear pipeline gets exactly the paper's product. An operator that saw no input in
    the period counts selectivity 1.

    Example: a source feeding a 10 % filter feeding a sink gives ``{"src": 1.0, "f": 0.1, "out": 0.1}``.
    """
    ops = period.operators
    upstream: dict[str, list[str]] = {name: [] for name in ops}
    for name, op in ops.items():
        for dst in op.sent:
            if dst in upstream:
                upstream[dst].append(name)
    memo: dict[str, float] = {}

    def cs(name: str) -> float:
        if name in memo:
            return memo[name]
        memo[name] = 1.0  # guards feedback loops through control inputs
        ups = upstream[name]
        base = sum(cs(u) for u in ups) / len(ups) if ups else 1.0
        memo[name] = base * ops[name].selectivity
        return memo[name]

    for name in ops:
        cs(name)
    return memo
