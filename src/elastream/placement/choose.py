"""Placement as a plug-in chosen by name: ``Runner(placement="auto" | "round_robin" | plan | dict | stats)``.

A planner takes the flow's :class:`~elastream.placement.graph.PlacementGraph`
and the process count and returns a :class:`~elastream.placement.plan.PlacementPlan`.
:func:`resolve_assignment` turns whatever the user gave into ``{operator: process}``.

Pure and deterministic; safe from any thread.

Example::

    resolve_assignment("round_robin", flow, 2)   # {'src': 0, 'map': 1, 'out': 0}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from elastream.errors import FlowValidationError
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats
from elastream.placement.graph import PlacementGraph
from elastream.placement.plan import PlacementPlan, place, round_robin

Planner = Callable[[PlacementGraph, int], PlacementPlan]

#: What separates an operator's name from its replica's suffix in a placement ("sum#0", "sum#split").
REPLICA_SEP = "#"

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
    given = _given_assignment(placement, processes)
    if given is not None:
        check_assignment(given, flow, processes)  # a plan or statistics of another flow name other operators
        return given
    planner = PLANNERS.get(placement) if isinstance(placement, str) else None
    if planner is None:
        raise ValueError(f"unknown placement {placement!r}: use one of {', '.join(sorted(PLANNERS))}, "
                         "a PlacementPlan or a dict")
    return dict(planner(PlacementGraph.from_flow(flow), processes).assignment)


def _given_assignment(placement: Any, processes: int) -> dict[str, int] | None:
    """The assignment a dict, a plan or an earlier run's statistics stand for (None: a planner's name)."""
    if isinstance(placement, Mapping):
        return dict(placement)
    if isinstance(placement, PlacementPlan):
        return dict(placement.assignment)
    if isinstance(placement, FlowStats):
        return dict(place(PlacementGraph.from_stats(placement), processes).assignment)
    return None


def check_assignment(assignment: Mapping[str, Any], flow: Flow, processes: int) -> None:
    """Raise FlowValidationError unless every key of ``assignment`` names an operator of ``flow`` and one of ``processes``.

    Keys may also name an operator's replicas, split or merge (``"sum#0"``, ``"sum#split"``); whether
    those are asked for is checked where the replicas are made. The message lists the valid names.

    Example: ``check_assignment({"src": 0, "nope": 1}, flow, 2)`` raises, naming 'nope' and the flow's operators.
    """
    valid = f"(its operators: {', '.join(sorted(flow.operators))})"
    for key in assignment:
        if _operator_of(key, flow) is None:
            raise FlowValidationError(f"placement names operator {key!r}, which is not in flow {flow.name!r} "
                                      f"{valid}", operator=key)
    for key, process in assignment.items():
        if not isinstance(process, int) or isinstance(process, bool) or not 0 <= process < processes:
            raise FlowValidationError(f"placement puts {key!r} on process {process!r}, but a run of {processes} "
                                      f"processes has processes 0..{processes - 1}", operator=key)


def check_complete(assignment: Mapping[str, Any], flow: Flow, replicated: Collection[str] = ()) -> None:
    """Raise FlowValidationError unless ``assignment`` places every operator of ``flow``.

    An operator in ``replicated`` needs no entry of its own: its replicas, split and merge are placed
    next to their neighbours unless pinned (a base plan for ``replicated_placement`` leaves them out).
    """
    covered = {_operator_of(key, flow) for key in assignment}
    missing = [name for name in flow.operators if name not in covered and name not in replicated]
    if missing:
        raise FlowValidationError(f"placement gives no process to {', '.join(map(repr, missing))} of flow "
                                  f"{flow.name!r}: name every operator (its operators: "
                                  f"{', '.join(sorted(flow.operators))})", operator=missing[0])


def _operator_of(key: str, flow: Flow) -> str | None:
    """The flow's operator ``key`` names: itself, or the one whose replica, split or merge it is."""
    if key in flow.operators:
        return key
    base = key.rpartition(REPLICA_SEP)[0]
    return base if base in flow.operators else None
