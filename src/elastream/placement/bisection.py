"""Balanced BFS bisection: TurboStream §V.C, Algorithm 2, applied recursively.

:func:`split_tasks` is Algorithm 2: from every start task, a breadth-first
walk gathers tasks while each one brings the gathered share of the weight
closer to ``target = ceil(N/2) / N``; among the walks that end balanced
(``|balance - target| < factor``) the one cutting the least traffic wins
(a part must also hold at least as many tasks as processes it is meant for).
:func:`bisect` recurses (§V.C): each part gets a number of processes
proportional to its workload — ``ceil(N/2)`` and ``floor(N/2)`` for a
balanced split — until a part has one process.

Deterministic: starts and unvisited tasks are taken in the graph's canonical
order, neighbours heaviest traffic first, ties by name. When no walk ends
balanced (e.g. one task outweighs the rest) the best-balanced one is kept. A
set whose weights are all zero is balanced by task count instead.

Pure functions; safe from any thread.

Example::

    g = PlacementGraph({f"t{i}": 1 for i in range(4)}, {(f"t{i}", f"t{i+1}"): 1 for i in range(3)})
    bisect(g, 2)          # {'t0': 0, 't1': 0, 't2': 1, 't3': 1}
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elastream.placement.graph import PlacementGraph

DEFAULT_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class Split:
    """One bisection: the gathered tasks (for ``ceil(N/2)`` processes) and the rest."""

    gathered: tuple[str, ...]
    rest: tuple[str, ...]
    balance: float        # gathered weight / total weight
    target: float         # ceil(N/2) / N
    cut_traffic: float    # traffic between the two parts
    balanced: bool        # |balance - target| < factor (Alg. 2 line 26)
    fits: bool            # each part has at least as many tasks as the processes it is meant for

    @property
    def usable(self) -> bool:
        """Balanced, and both parts can fill their ceil(N/2) / floor(N/2) processes."""
        return self.balanced and self.fits


def split_tasks(graph: PlacementGraph, tasks: Sequence[str], n_processes: int,
                factor: float = DEFAULT_FACTOR) -> Split:
    """Algorithm 2: split ``tasks`` (a subset of ``graph``) for ``n_processes`` ≥ 2 processes.

    Only edges inside ``tasks`` count, for the walk and for the cut.

    Example::

        split_tasks(g, g.tasks, 2).gathered      # ('t0', 't1')
    """
    if n_processes < 2 or len(tasks) < 2:
        raise ValueError("a split needs at least two processes and two tasks")
    members = frozenset(tasks)
    weight = _weight_fn(graph, tasks)
    total = math.fsum(weight(t) for t in tasks)                        # Alg. 2 line 1
    target = math.ceil(n_processes / 2) / n_processes                  # lines 2-3
    edges = [(s, d, x) for (s, d), x in graph.traffic.items() if s in members and d in members]
    parts = (math.ceil(n_processes / 2), n_processes // 2)
    best: Split | None = None
    for start in tasks:                                                # line 4
        gathered = _gather(graph, tasks, members, start, weight, total, target, factor)
        cand = _split_of(tasks, gathered, edges, weight, total, target, factor, parts)
        if best is None or _rank(cand) < _rank(best):                  # lines 26-30
            best = cand
    assert best is not None
    if not best.gathered or not best.rest:  # every walk degenerate (e.g. one task holds all the weight)
        heaviest = min(tasks, key=lambda t: -weight(t))
        best = _split_of(tasks, [heaviest], edges, weight, total, target, factor, parts)
    return best


def bisect(graph: PlacementGraph, n_processes: int, *, factor: float = DEFAULT_FACTOR) -> dict[str, int]:
    """Assign every task of ``graph`` (e.g. the parent tasks of a consolidation) to a process.

    Algorithm 2 splits recursively (§V.C) until each part has one process.
    With more processes than tasks, every task gets a process of its own and
    the processes left empty are the last ones.

    Example::

        bisect(g, 2)          # task -> process index in 0..n_processes-1
    """
    return bisect_splits(graph, n_processes, factor=factor)[0]


def bisect_splits(graph: PlacementGraph, n_processes: int, *,
                  factor: float = DEFAULT_FACTOR) -> tuple[dict[str, int], list[Split]]:
    """:func:`bisect`, also returning every :class:`Split` made (depth first, outermost first)."""
    if isinstance(n_processes, bool) or not isinstance(n_processes, int) or n_processes < 1:
        raise ValueError(f"n_processes must be an int >= 1, got {n_processes!r}")
    if not 0 < factor <= 1:
        raise ValueError(f"factor must be in (0, 1], got {factor!r}")
    assignment: dict[str, int] = {}
    splits: list[Split] = []
    _assign(graph, graph.tasks, 0, n_processes, factor, assignment, splits)
    return assignment, splits


def _assign(graph: PlacementGraph, tasks: Sequence[str], first: int, n: int, factor: float,
            out: dict[str, int], splits: list[Split]) -> None:
    """§V.C: split, give each part processes in proportion to its workload, recurse."""
    if n == 1 or len(tasks) <= 1:
        for t in tasks:
            out[t] = first
        return
    split = split_tasks(graph, tasks, n, factor)
    splits.append(split)
    n1, n2 = _share_processes(split, n)
    _assign(graph, split.gathered, first, n1, factor, out, splits)
    _assign(graph, split.rest, first + n1, n2, factor, out, splits)


def _share_processes(split: Split, n: int) -> tuple[int, int]:
    """ceil(N/2) / floor(N/2) for a balanced split, else proportional to the parts' workload.

    Never more processes than tasks on a side; the leftover processes stay empty.
    """
    if split.usable:
        n1 = math.ceil(n / 2)                                          # Alg. 2 line 2
    else:
        n1 = min(max(math.floor(n * split.balance + 0.5), 1), n - 1)
    n1 = max(n1, n - len(split.rest))  # the rest never gets more processes than it has tasks ...
    n1 = max(min(n1, len(split.gathered), n - 1), 1)  # ... nor the gathered part
    return n1, min(n - n1, len(split.rest))


def _weight_fn(graph: PlacementGraph, tasks: Sequence[str]) -> Callable[[str], float]:
    """Task weights, or 1 per task when the whole set weighs nothing (balance by count)."""
    if any(graph.weights[t] > 0 for t in tasks):
        return graph.weights.__getitem__
    return lambda _t: 1.0


def _gather(graph: PlacementGraph, tasks: Sequence[str], members: frozenset[str], start: str,
            weight: Callable[[str], float], total: float, target: float, factor: float) -> list[str]:
    """Alg. 2 lines 5-25: the breadth-first walk from ``start``."""
    queue = deque([start])                                             # line 8
    seen = {start}                                                     # queued or visited
    gathered: list[str] = []
    gather_w, balance = 0.0, 0.0                                       # line 7
    pending = iter(tasks)                                              # unvisited tasks, canonical order
    while queue and balance < target:                                  # line 9
        c = queue.popleft()                                            # line 10
        temp = (gather_w + weight(c)) / total                          # lines 11-12
        if abs(temp - target) < abs(balance - target):                 # lines 13-15
            gathered.append(c)                                         # line 16
            gather_w, balance = gather_w + weight(c), temp             # line 17
            for u, _ in graph.neighbours(c):                           # line 18, heaviest traffic first
                if u in members and u not in seen:
                    seen.add(u)
                    queue.append(u)
        if not queue and abs(balance - target) > factor:               # lines 21-23: jump to another
            nxt = next((t for t in pending if t not in seen), None)    # component or region
            if nxt is not None:
                seen.add(nxt)
                queue.append(nxt)
    return gathered


def _split_of(tasks: Sequence[str], gathered: Sequence[str], edges: list[tuple[str, str, float]],
              weight: Callable[[str], float], total: float, target: float, factor: float,
              parts: tuple[int, int]) -> Split:
    side = frozenset(gathered)
    balance = math.fsum(weight(t) for t in gathered) / total
    cut = math.fsum(x for s, d, x in edges if (s in side) != (d in side))
    first, rest = tuple(t for t in tasks if t in side), tuple(t for t in tasks if t not in side)
    return Split(gathered=first, rest=rest, balance=balance, target=target, cut_traffic=cut,
                 balanced=abs(balance - target) < factor, fits=len(first) >= parts[0] and len(rest) >= parts[1])


def _rank(split: Split) -> tuple[int, float, float]:
    """Usable splits first, least cut among them (line 27); otherwise the best balance.

    A balanced part holding fewer tasks than its processes is not usable: its
    processes could not all be filled, so the balance would be lost.
    """
    off = abs(split.balance - split.target)
    if split.usable:
        return 0, split.cut_traffic, off
    return (1 if split.fits else 2), off, split.cut_traffic
