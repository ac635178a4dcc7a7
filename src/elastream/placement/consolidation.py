"""Task consolidation: TurboStream §V.B, Algorithm 1.

Each level pairs every task with its heaviest-traffic unvisited neighbour into
a parent task (or makes it a parent on its own), then builds the parent graph:
streams inside a parent are dropped, parallel streams between two parents are
summed. Levels repeat until fewer parent tasks than ``task_num_threshold``
remain; the levels form the relational tree that maps a parent back to the
original tasks (Fig. 7), which assignment (§V.C) uses.

Tie-breaking is deterministic: tasks are visited in the graph's canonical
order and neighbours with equal traffic are taken in name order.

Pure functions; safe from any thread.

Example::

    g = PlacementGraph({"a": 1, "b": 1, "c": 1}, {("a", "b"): 5, ("b", "c"): 1})
    c = consolidate(g, task_num_threshold=3)
    c.top.tasks                   # ('L1.0', 'L1.1')
    c.members("L1.0")             # ('a', 'b')
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from elastream.placement.graph import Edge, PlacementGraph


@dataclass(frozen=True, slots=True)
class ConsolidationLevel:
    """One level of Algorithm 1: the parent graph and each parent's one or two children."""

    graph: PlacementGraph
    children: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Consolidation:
    """The relational tree of Algorithm 1: the original graph and the levels built over it.

    Level 0 is ``base`` itself; level ``k`` (1 ≤ k ≤ ``depth``) names its parent
    tasks ``"L<k>.<i>"``.
    """

    base: PlacementGraph
    levels: tuple[ConsolidationLevel, ...]

    @property
    def depth(self) -> int:
        """How many levels of parents were built (0: none)."""
        return len(self.levels)

    @property
    def top(self) -> PlacementGraph:
        """The graph of the last level's parent tasks (``base`` when there are no levels)."""
        return self.graph_at(self.depth)

    def graph_at(self, level: int) -> PlacementGraph:
        """The task graph of ``level`` (0 = the original tasks)."""
        if not 0 <= level <= self.depth:
            raise ValueError(f"level {level} out of range 0..{self.depth}")
        return self.levels[level - 1].graph if level else self.base

    def members(self, task: str, level: int | None = None) -> tuple[str, ...]:
        """The original tasks under ``task`` of ``level`` (default: the top level), in canonical order."""
        level = self.depth if level is None else level
        found = [task]
        for k in range(level, 0, -1):  # walk down the tree one level at a time
            children = self.levels[k - 1].children
            found = [child for t in found for child in children[t]]
        rank = {t: i for i, t in enumerate(self.base.tasks)}
        return tuple(sorted(found, key=rank.__getitem__))

    def tree(self, level: int | None = None) -> dict[str, tuple[str, ...]]:
        """Every parent task of ``level`` (default: the top) → the original tasks it holds."""
        level = self.depth if level is None else level
        return {t: self.members(t, level) for t in self.graph_at(level).tasks}


def consolidate_level(graph: PlacementGraph, level: int = 1) -> ConsolidationLevel:
    """One level of Algorithm 1 over ``graph``; parents are named ``"L<level>.<i>"``.

    Example::

        consolidate_level(g).children     # {'L1.0': ('a', 'b'), 'L1.1': ('c',)}
    """
    visited: set[str] = set()
    children: dict[str, tuple[str, ...]] = {}
    for v in graph.tasks:                                    # Alg. 1 line 2
        if v in visited:                                     # line 3
            continue
        visited.add(v)
        # lines 4-13: neighbours by traffic, heaviest first; pair with the first unvisited one
        partner = next((u for u, _ in graph.neighbours(v) if u not in visited), None)
        if partner is not None:
            visited.add(partner)
        # lines 15-18: no unvisited neighbour, so v is a parent on its own
        children[f"L{level}.{len(children)}"] = (v,) if partner is None else (v, partner)
    return ConsolidationLevel(_parent_graph(graph, children), MappingProxyType(children))


def consolidate(graph: PlacementGraph, task_num_threshold: int) -> Consolidation:
    """Algorithm 1 repeated until fewer than ``task_num_threshold`` parent tasks remain.

    Stops early when a level merges nothing (only isolated tasks are left),
    so a disconnected graph ends with one parent per connected component at
    the latest. ``task_num_threshold=1`` therefore builds the whole tree.

    Example::

        c = consolidate(PlacementGraph.from_flow(flow), task_num_threshold=4)
        c.tree()          # parent → original operator names
    """
    if isinstance(task_num_threshold, bool) or not isinstance(task_num_threshold, int) or task_num_threshold < 1:
        raise ValueError(f"task_num_threshold must be an int >= 1, got {task_num_threshold!r}")
    levels: list[ConsolidationLevel] = []
    current = graph
    while len(current) >= task_num_threshold:
        nxt = consolidate_level(current, len(levels) + 1)
        if len(nxt.graph) == len(current):
            break
        levels.append(nxt)
        current = nxt.graph
    return Consolidation(graph, tuple(levels))


def _parent_graph(graph: PlacementGraph, children: Mapping[str, tuple[str, ...]]) -> PlacementGraph:
    """Parent weights are sums; Alg. 1 lines 21-27 keep only streams between different parents."""
    parent_of = {child: p for p, kids in children.items() for child in kids}
    weights = {p: sum(graph.weights[c] for c in kids) for p, kids in children.items()}
    traffic: dict[Edge, float] = defaultdict(float)
    for (src, dst), x in graph.traffic.items():
        p1, p2 = parent_of[src], parent_of[dst]
        if p1 != p2:                                         # line 24
            traffic[(p1, p2)] += x                           # line 25, parallel streams summed
    return PlacementGraph(weights, traffic)
