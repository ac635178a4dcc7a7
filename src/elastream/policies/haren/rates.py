"""Quantities over an operator's downstream path shared by HR, Chain and Multi-class (computed once
per scheduling task: kept in the feature table's ``memo``).

* :func:`global_output_rate` (Sharaf et al.'s Highest Rate): the egress tuples per second of work
  that running the operator and everything downstream of it would produce;
* :func:`chain_priorities` (Babcock et al.'s Chain): the slope of the lower envelope of each query's
  progress chart at the operator.

Both walk the graph without recursion (a chain of 1,000 operators needs no deep stack).
"""

from __future__ import annotations

from collections.abc import Sequence

from elastream.policies.haren.features import FeatureTable
from elastream.policies.haren.operators import OperatorView

#: Paths explored from one operator when the graph forks (the envelope of a tree of branches).
MAX_PATHS = 64


def downstream_output_and_cost(views: Sequence[OperatorView], features: FeatureTable) -> list[tuple[float, float]]:
    """Per operator i: (egress tuples per tuple entering i, seconds of work per tuple entering i),
    over i and everything downstream (fan-out adds the branches). Memoised per scheduling task."""
    memo = features.memo
    found = memo.get("downstream")
    if found is not None:
        return found
    sel, cost = features["selectivity"], features["cost"]
    result: list[tuple[float, float] | None] = [None] * len(views)
    for root in range(len(views)):
        stack = [root]
        while stack:
            i = stack[-1]
            if result[i] is not None:
                stack.pop()
                continue
            pending = [k for k in views[i].downstream if result[k] is None and k not in stack]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            downs = [result[k] for k in views[i].downstream if result[k] is not None]
            s, c = sel[i], cost[i]
            if not downs:
                result[i] = (s, c)
            else:
                result[i] = (s * sum(o for o, _ in downs), c + s * sum(w for _, w in downs))
    memo["downstream"] = result
    return result  # type: ignore[return-value]


def global_output_rate(op: OperatorView, views: Sequence[OperatorView], features: FeatureTable) -> float:
    """Egress tuples per second of work from running ``op`` and its downstream path (HR's priority)."""
    out, work = downstream_output_and_cost(views, features)[op.index]
    return out / work if work > 0 else float("inf")


def chain_priorities(views: Sequence[OperatorView], features: FeatureTable) -> list[float]:
    """Chain's priority of every operator: the slope of its segment of the lower envelope.

    A query's progress chart goes through (time, size) points from (0, 1) at its head: the summed
    costs and the product of selectivities down the path. From a segment's first point the envelope
    goes to the later point of steepest descent; every operator on the way gets that slope, and the
    next segment starts there. Memoised per scheduling task.
    """
    memo = features.memo
    found = memo.get("chain")
    if found is not None:
        return found
    sel, cost = features["selectivity"], features["cost"]
    prio: list[float | None] = [None] * len(views)
    starts = [(v.index, 0.0, 1.0) for v in views if not v.upstream]
    while starts:
        i, t0, s0 = starts.pop()
        if prio[i] is not None:
            continue
        slope, path, t1, s1 = _steepest(views, sel, cost, i, t0, s0)
        for k in path:
            if prio[k] is None:
                prio[k] = slope
        on_path = set(path)
        for k in path:
            starts.extend((d, t1, s1) for d in views[k].downstream if prio[d] is None and d not in on_path)
    result = [p if p is not None else 0.0 for p in prio]
    memo["chain"] = result
    return result


def _steepest(views: Sequence[OperatorView], sel: list[float], cost: list[float], start: int, t0: float,
              s0: float) -> tuple[float, list[int], float, float]:
    """(slope, path, time, size) of the steepest descent from the point (t0, s0) at ``start``'s input."""
    best: tuple[float, list[int], float, float] = (-1.0, [start], t0, s0)
    stack = [(start, t0, s0, (start,))]
    explored = 0
    while stack and explored < MAX_PATHS * 16:
        i, t, s, path = stack.pop()
        explored += 1
        t, s = t + cost[i], s * sel[i]
        slope = (s0 - s) / (t - t0) if t > t0 else 0.0
        if slope > best[0]:
            best = (slope, list(path), t, s)
        for k in views[i].downstream[:MAX_PATHS]:
            if k not in path:
                stack.append((k, t, s, path + (k,)))
    return best
