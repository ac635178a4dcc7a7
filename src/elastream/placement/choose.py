"""Placement as a plug-in chosen by name: ``Runner(placement="auto" | "round_robin" | plan | dict | stats)``.

A planner takes the flow's :class:`~elastream.placement.graph.PlacementGraph`
and the process count and returns a :class:`~elastream.placement.plan.PlacementPlan`.
:func:`resolve_assignment` turns whatever the user gave into ``{operator: process}``.

Pure and deterministic; safe from any thread.

Example::

    resolve_assignment("round_robin", flow, 2)   # {'src': 0, 'map': 1, 'out': 0}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats
from elastream.placement.graph import PlacementGraph
from elastream.placement.plan import PlacementPlan, place, round_robin

Planner = Callable[[PlacementGraph, int], PlacementPlan]

#: Placement plug-ins by name. "auto" is TurboStream §V's offline plan (consolidation + bisection).
PLANNERS: dict[str, Planner] = {"auto": place, "round_robin": round_robin}


def register_planner(name: str, planner: Planner) -> None:
    """Make ``Runner(placement=name)`` use ``planner``."""
    PLANNERS[name] = planner


def resolve_assignment(placement: Any, flow: Flow, processes: int) -> dict[str, int]:
    """Operator name → worker process, from what ``Runner(placement=...)`` was given.

    ``placement`` is a planner's name, a PlacementPlan, a dict, or the FlowStats of an earlier run
    of the same flow (online mode: measured traffic and CPU time per operator, re-placed between
    runs as TurboStream's stop-and-restart does).
    """
    if isinstance(placement, Mapping):
        return dict(placement)
    if isinstance(placement, PlacementPlan):
        return dict(placement.assignment)
    if isinstance(placement, FlowStats):
        return dict(place(PlacementGraph.from_stats(placement), processes).assignment)
    planner = PLANNERS.get(placement) if isinstance(placement, str) else None
    if planner is None:
        raise ValueError(f"unknown placement {placement!r}: use one of {', '.join(sorted(PLANNERS))}, "
                         "a PlacementPlan or a dict")
    return dict(planner(PlacementGraph.from_flow(flow), processes).assignment)
