"""Placement of operators onto worker processes: TurboStream's coarse-grained scheduler (§V).

Layer: beside ``ipc``; depends only on the flow graph (and only to read it).
The multi-process runtime consumes a :class:`PlacementPlan`'s ``assignment``;
its online monitor (§V.D) feeds :meth:`PlacementGraph.from_measurements`.

* :mod:`~elastream.placement.graph` — :class:`PlacementGraph` (weights, traffic; offline and online builders)
* :mod:`~elastream.placement.consolidation` — Algorithm 1, :func:`consolidate`
* :mod:`~elastream.placement.bisection` — Algorithm 2, :func:`bisect`
* :mod:`~elastream.placement.plan` — :func:`place`, :func:`round_robin`, :func:`evaluate`, :class:`PlacementPlan`

Everything here is pure and deterministic; safe from any thread.

Example::

    from elastream.placement import PlacementGraph, place, round_robin

    graph = PlacementGraph.from_flow(flow)
    plan = place(graph, processes=2)
    print(plan.describe())
    print(round_robin(graph, 2).cut_traffic, plan.cut_traffic)
"""

from elastream.placement.bisection import Split, bisect, bisect_splits, split_tasks
from elastream.placement.consolidation import Consolidation, ConsolidationLevel, consolidate, consolidate_level
from elastream.placement.graph import PlacementGraph, name_key
from elastream.placement.plan import PlacementPlan, evaluate, place, round_robin

__all__ = [
    "Consolidation", "ConsolidationLevel", "PlacementGraph", "PlacementPlan", "Split", "bisect", "bisect_splits",
    "consolidate", "consolidate_level", "evaluate", "name_key", "place", "round_robin", "split_tasks",
]
