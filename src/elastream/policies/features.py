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
    the period counts selectivity 1. Each operator is computed once, after its publishers (a
    depth-first walk up the edges with an explicit stack, so a 1,000-operator chain needs no
    recursion); a publisher reached again through a feedback loop (a control input) counts 1.

    Example: a source feeding a 10 % filter feeding a sink gives ``{"src": 1.0, "f": 0.1, "out": 0.1}``.
    """
    ops = period.operators
    upstream = _publishers(period)
    cs: dict[str, float] = {}
    for root in ops:
        if root in cs:
            continue
        cs[root] = 1.0  # in progress: what a loop back to it reads
        stack = [(root, iter(upstream[root]))]
        while stack:
            name, pending = stack[-1]
            unseen = next((u for u in pending if u not in cs), None)
            if unseen is not None:
                cs[unseen] = 1.0
                stack.append((unseen, iter(upstream[unseen])))
                continue
            stack.pop()
            ups = upstream[name]
            base = sum(cs[u] for u in ups) / len(ups) if ups else 1.0
            cs[name] = base * ops[name].selectivity
    return cs


def _publishers(period: PeriodStats) -> dict[str, list[str]]:
    """Operator name → the operators that sent it tuples over the period (in the snapshot's order)."""
    upstream: dict[str, list[str]] = {name: [] for name in period.operators}
    for name, op in period.operators.items():
        for dst in op.sent:
            if dst in upstream:
                upstream[dst].append(name)
    return upstream
