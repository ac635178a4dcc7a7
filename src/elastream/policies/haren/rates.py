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

def downstream_output_and_cost(views: Sequence[OperatorView], features: FeatureTable) -> list[tuple[float, float]]:
    """Per operator i: (egress tuples per tuple entering i, seconds of work per tuple entering i),
    over i and everything downstream (fan-out adds the branches). Memoised per scheduling task."""
    memo = features.memo
    found = memo.get("downstream")
    if found is not None:
        return found
    sel, cost = features["selectivity"], features["cost"]
    result: list[tuple[float, float]] = [(1.0, 0.0)] * len(views)
    for i in sinks_first(views, features):
        downs = views[i].downstream
        s, c = sel[i], cost[i]
        if not downs:
            result[i] = (s, c)
        else:
            result[i] = (s * sum(result[k][0] for k in downs), c + s * sum(result[k][1] for k in downs))
    memo["downstream"] = result
    return result


def sinks_first(views: Sequence[OperatorView], features: FeatureTable) -> list[int]:
    """Operator indices, each after all its subscribers (a loop's remainder last); kept on the table,
    whose operators do not change."""
    order = features.graph_cache.get("sinks_first")
    if order is None:
        pending = [len(v.downstream) for v in views]
        order = [v.index for v in views if not v.downstream]
        k = 0
        while k < len(order):
            for u in views[order[k]].upstream:
                pending[u] -= 1
                if pending[u] == 0:
                    order.append(u)
            k += 1
        seen = set(order)
        order += [v.index for v in views if v.index not in seen]
        features.graph_cache["sinks_first"] = order
    return order


def global_output_rate(op: OperatorView, views: Sequence[OperatorView], features: FeatureTable) -> float:
    """Egress tuples per second of work from running ``op`` and its downstream path (HR's priority)."""
    out, work = downstream_output_and_cost(views, features)[op.index]
    return out / work if work > 0 else float("inf")


def chain_priorities(views: Sequence[OperatorView], features: FeatureTable) -> list[float]:
    """Chain's priority of every operator: the slope of its segment of the lower envelope.

    A query's progress chart goes through (time, size) points from (0, 1) at its head: the summed
    costs and the product of selectivities down the path. From a segment's first point the envelope
    goes to the later point of steepest descent; every operator on the way gets that slope, and the
    next segment starts there. The chart is drawn along linear stretches of the graph; at a fork each
    branch continues from the fork's point (Babcock et al. define it on chains). Memoised per
    scheduling task.
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
        path = _linear_stretch(views, i, prio)
        t1, s1 = _envelope(path, sel, cost, t0, s0, prio)
        starts.extend((d, t1, s1) for d in views[path[-1]].downstream if prio[d] is None)
    result = [p if p is not None else 0.0 for p in prio]
    memo["chain"] = result
    return result


def _linear_stretch(views: Sequence[OperatorView], start: int, prio: list[float | None]) -> list[int]:
    """``start`` and the operators after it while each has one subscriber with one publisher."""
    path = [start]
    i = start
    while len(views[i].downstream) == 1:
        k = views[i].downstream[0]
        if len(views[k].upstream) != 1 or prio[k] is not None or k == start:
            break
        path.append(k)
        i = k
    return path


def _envelope(path: list[int], sel: list[float], cost: list[float], t0: float, s0: float,
              prio: list[float | None]) -> tuple[float, float]:
    """Give every operator of ``path`` its envelope slope from (t0, s0); return the path's end point."""
    times, sizes = [t0], [s0]
    for i in path:
        times.append(times[-1] + cost[i])
        sizes.append(sizes[-1] * sel[i])
    a, n = 0, len(path)
    while a < n:
        best, end = 0.0, a + 1
        for b in range(a + 1, n + 1):
            dt = times[b] - times[a]
            if dt > 0:
                slope = (sizes[a] - sizes[b]) / dt
                if slope > best:
                    best, end = slope, b
        for k in range(a, end):
            prio[path[k]] = best
        a = end
    return times[-1], sizes[-1]
