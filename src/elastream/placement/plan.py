"""Placement plans: TurboStream's coarse-grained scheduler end to end (§V), and a round-robin baseline.

:func:`place` consolidates the tasks (Algorithm 1), bisects the parent tasks
over the processes (Algorithm 2, recursively as in §V.C) and maps parents back
to the original tasks through the relational tree. :func:`round_robin` is the
default placement of Storm/JStorm-like systems, for comparison, and
:func:`evaluate` scores any assignment (e.g. the current one against fresh
measurements, to decide whether re-placement pays, §V.D).

Pure functions returning frozen plans; safe from any thread.

Example::

    graph = PlacementGraph.from_flow(flow)
    plan = place(graph, processes=2)
    plan.assignment["busy_0"]            # process index
    plan.cut_traffic, round_robin(graph, 2).cut_traffic
    print(plan.describe())
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastream.placement.bisection import DEFAULT_FACTOR, bisect_splits
from elastream.placement.consolidation import Consolidation, consolidate
from elastream.placement.graph import PlacementGraph


@dataclass(frozen=True, slots=True)
class PlacementPlan:
    """Which process runs each task, and what that costs.

    ``imbalance`` is max load / mean load over all ``processes`` (1.0 is
    perfect; empty processes count, so idle capacity shows). ``level`` and
    ``parent_tasks`` say which consolidation level was bisected; ``balanced``
    whether every bisection met ``|balance - target| < factor`` with enough
    tasks on each side for its processes.
    """

    processes: int
    assignment: dict[str, int]
    load_per_process: tuple[float, ...]
    cut_traffic: float
    total_traffic: float
    imbalance: float
    task_load: dict[str, float] = field(repr=False)
    method: str = "turbostream"
    level: int = 0
    parent_tasks: int = 0
    balanced: bool = True

    @property
    def empty_processes(self) -> tuple[int, ...]:
        """Processes that run no task."""
        used = set(self.assignment.values())
        return tuple(p for p in range(self.processes) if p not in used)

    @property
    def cut_fraction(self) -> float:
        """Share of the traffic that crosses processes (0 when there is no traffic)."""
        return self.cut_traffic / self.total_traffic if self.total_traffic > 0 else 0.0

    def tasks_on(self, process: int) -> tuple[str, ...]:
        """The tasks assigned to ``process``, in the graph's canonical order."""
        return tuple(t for t, p in self.assignment.items() if p == process)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the plan."""
        return {"method": self.method, "processes": self.processes, "assignment": dict(self.assignment),
                "task_load": dict(self.task_load), "load_per_process": list(self.load_per_process),
                "cut_traffic": self.cut_traffic, "total_traffic": self.total_traffic,
                "cut_fraction": self.cut_fraction, "imbalance": self.imbalance,
                "empty_processes": list(self.empty_processes), "level": self.level,
                "parent_tasks": self.parent_tasks, "balanced": self.balanced}

    def describe(self) -> str:
        """A plain-text summary: processes with their load and tasks, cut and total traffic."""
        total_load = math.fsum(self.load_per_process)
        lines = [f"{self.method} placement of {len(self.assignment)} tasks onto {self.processes} processes"
                 + (f" (consolidation level {self.level}, {self.parent_tasks} parent tasks"
                    f"{'' if self.balanced else ', not balanced within factor'})"
                    if self.method == "turbostream" else "")]
        for p, load in enumerate(self.load_per_process):
            tasks = self.tasks_on(p)
            share = f"{load / total_load:.1%}" if total_load > 0 else "-"
            lines.append(f"  process {p}: load {load:g} ({share}), "
                         + (f"{len(tasks)} tasks: {', '.join(tasks)}" if tasks else "empty"))
        lines.append(f"  cut traffic {self.cut_traffic:g} of {self.total_traffic:g} ({self.cut_fraction:.1%}), "
                     f"imbalance {self.imbalance:.3f}")
        if self.empty_processes:
            lines.append(f"  {len(self.empty_processes)} of {self.processes} processes are empty "
                         f"(more processes than the plan could fill)")
        return "\n".join(lines)


def evaluate(graph: PlacementGraph, assignment: Mapping[str, int], processes: int, *,
             method: str = "given", level: int = 0, parent_tasks: int | None = None,
             balanced: bool = True) -> PlacementPlan:
    """Score ``assignment`` on ``graph``: loads, cut and total traffic, imbalance.

    Every task must be assigned exactly once to a process in ``0..processes-1``.

    Example::

        evaluate(graph, current.assignment, 2).cut_traffic    # today's traffic under the old plan
    """
    _check_processes(processes)
    missing = [t for t in graph.tasks if t not in assignment]
    extra = [t for t in assignment if t not in graph.weights]
    bad = {t: p for t, p in assignment.items()
           if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < processes}
    if missing or extra or bad:
        raise ValueError(f"invalid assignment: unassigned {missing}, unknown {extra}, "
                         f"bad process index {bad} (processes={processes})")
    ordered = {t: assignment[t] for t in graph.tasks}
    loads = [0.0] * processes
    for t, p in ordered.items():
        loads[p] += graph.weights[t]
    mean = math.fsum(loads) / processes
    return PlacementPlan(
        processes=processes, assignment=ordered, load_per_process=tuple(loads),
        cut_traffic=graph.crossing_traffic(ordered), total_traffic=graph.total_traffic,
        imbalance=max(loads) / mean if mean > 0 else 1.0, task_load=dict(graph.weights), method=method,
        level=level, parent_tasks=len(graph) if parent_tasks is None else parent_tasks, balanced=balanced)


def place(graph: PlacementGraph, processes: int, *, task_num_threshold: int | None = None,
          factor: float = DEFAULT_FACTOR) -> PlacementPlan:
    """TurboStream's coarse-grained scheduler: Algorithm 1, then Algorithm 2 recursively (§V.B-C).

    With ``task_num_threshold`` the paper's pipeline runs as is: consolidate
    until fewer parent tasks than the threshold remain, bisect those. Left at
    None, the whole relational tree is built (threshold 1) and every level
    with at least ``min(processes, len(graph))`` parent tasks is bisected. The
    plan kept is, among those whose every split is balanced, the one with the
    least cut traffic, then the least imbalance, then the coarsest level; when
    none is balanced, the least imbalanced. The paper leaves the threshold
    open; this way a level too coarse to balance, or needlessly coarse, is
    avoided.

    Example::

        place(graph, 2).assignment                           # task -> 0 or 1
        place(graph, 4, task_num_threshold=8, factor=0.05)   # the paper's fixed threshold
    """
    _check_processes(processes)
    if processes == 1 or len(graph) <= 1:
        return evaluate(graph, dict.fromkeys(graph.tasks, 0), processes, method="turbostream")
    # A graph that weighs nothing (e.g. no CPU measured yet) is balanced by task count.
    planned = graph if graph.total_weight > 0 else PlacementGraph(dict.fromkeys(graph.tasks, 1.0), graph.traffic)
    if task_num_threshold is not None:
        tree = consolidate(planned, task_num_threshold)
        return _plan_at(graph, tree, tree.depth, processes, factor)
    tree = consolidate(planned, 1)
    enough = min(processes, len(graph))
    plans = [_plan_at(graph, tree, level, processes, factor) for level in range(tree.depth, -1, -1)
             if len(tree.graph_at(level)) >= enough]
    return min(plans, key=_rank)


def round_robin(graph: PlacementGraph, processes: int) -> PlacementPlan:
    """The baseline: task ``i`` of the canonical order goes to process ``i % processes``.

    Example: ``round_robin(graph, 2).cut_traffic`` — every edge of a chain is cut.
    """
    _check_processes(processes)
    return evaluate(graph, {t: i % processes for i, t in enumerate(graph.tasks)}, processes,
                    method="round-robin")


def _plan_at(graph: PlacementGraph, tree: Consolidation, level: int, processes: int,
             factor: float) -> PlacementPlan:
    """Bisect the parent tasks of ``level``, map them back to the original tasks (§V.C), score on ``graph``."""
    parents = tree.graph_at(level)
    by_parent, splits = bisect_splits(parents, processes, factor=factor)
    assignment = {t: p for parent, p in by_parent.items() for t in tree.members(parent, level)}
    return evaluate(graph, assignment, processes, method="turbostream", level=level,
                    parent_tasks=len(parents), balanced=all(s.usable for s in splits))


def _rank(plan: PlacementPlan) -> tuple[int, float, float]:
    """Balanced plans by least cut, then least imbalance; unbalanced ones by least imbalance first."""
    if plan.balanced:
        return 0, plan.cut_traffic, plan.imbalance
    return 1, plan.imbalance, plan.cut_traffic


def _check_processes(processes: int) -> None:
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an int >= 1, got {processes!r}")
