"""``elastream placement FLOW --processes P``: plan operator placement offline (TurboStream §V).

FLOW is a built-in workload (``chain``, ``data-parallel``, ``tree``,
``reverse-tree``, built with the ``--cost-us``/``--selectivity``/``--ops``/
``--depth`` options), ``package.module:function`` or
``path/to/file.py:function``; the function takes no arguments and returns an
``es.Flow`` (or a tuple whose first item is one). A module is looked for in
the current folder first, then on Python's path, as ``python -m`` does. Nothing runs: the plan comes
from the graph and the operators' declared costs (``cost_us``, ``selectivity``).

Prints a table of operator → process with each operator's load, the load per
process, the cut traffic against the total, and the round-robin baseline's
cut traffic; ``--json`` prints one JSON object instead. Runs in the caller's
thread.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.errors import ElastreamError
from elastream.graph.flow import Flow
from elastream.placement import PlacementGraph, PlacementPlan, place, round_robin
from elastream.workloads.topologies import TOPOLOGIES, build_topology


def add_parser(sub: Any) -> None:
    """Register ``placement`` on the top-level sub-parsers."""
    p = sub.add_parser("placement", help="plan the placement of a flow's operators onto worker processes",
                       description="TurboStream §V coarse-grained placement: task consolidation "
                                   "(Algorithm 1) and balanced BFS bisection (Algorithm 2).")
    p.add_argument("flow", metavar="FLOW",
                   help=f"built-in workload ({', '.join(TOPOLOGIES)}), module:function or path/to/file.py:function "
                        "returning an es.Flow")
    p.add_argument("--processes", "-p", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--threshold", type=int, default=None,
                   help="taskNumThreshold of Algorithm 1 (default: try every consolidation level)")
    p.add_argument("--factor", type=float, default=0.1, help="balance tolerance of Algorithm 2 (default 0.1)")
    w = p.add_argument_group("built-in workloads")
    w.add_argument("--cost-us", type=float, default=100.0, help="Busy cost per tuple in µs (default 100)")
    w.add_argument("--selectivity", type=float, default=1.0, help="Busy selectivity (default 1)")
    w.add_argument("--ops", type=int, default=12, help="Busy operators of chain / data-parallel (default 12)")
    w.add_argument("--depth", type=int, default=6, help="levels of tree / reverse-tree (default 6)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Load the flow, plan it and the round-robin baseline, print the report; 2 on bad input."""
    try:
        if args.processes < 1:
            raise ValueError("--processes must be >= 1")
        flow = load_flow(args.flow, cost_us=args.cost_us, selectivity=args.selectivity, ops=args.ops,
                         depth=args.depth)
        flow.validate()
        graph = PlacementGraph.from_flow(flow)
        plan = place(graph, args.processes, task_num_threshold=args.threshold, factor=args.factor)
    except (ElastreamError, ValueError, TypeError, ImportError, AttributeError, OSError) as exc:
        print(f"elastream placement: error: {exc}", file=sys.stderr)
        return 2
    baseline = round_robin(graph, args.processes)
    if args.json:
        print(json.dumps(report_dict(flow, graph, plan, baseline, args.factor), indent=2, allow_nan=False))
    else:
        from elastream.bench._common import make_console

        print_report(make_console(), flow, graph, plan, baseline, args.factor)
    return 0


def load_flow(spec: str, **workload: Any) -> Flow:
    """The flow FLOW names: a built-in workload, ``module:function`` or ``file.py:function``.

    Example: ``load_flow("chain", cost_us=100, selectivity=1, ops=12, depth=6).name == "chain"``
    """
    if spec in TOPOLOGIES:
        flow, _ = build_topology(spec, n_tuples=1, gil="hold", **workload)
        return flow
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise ValueError(f"FLOW {spec!r} is neither a built-in workload ({', '.join(TOPOLOGIES)}) "
                         "nor module:function / path/to/file.py:function")
    with _current_folder_on_path():  # also while the function runs: it may import its neighbours
        module = _load_file(target) if target.endswith(".py") or "/" in target else _import_module(target, func)
        fn = getattr(module, func, None)
        if not callable(fn):
            raise AttributeError(f"{target!r} has no function {func!r}")
        built = fn()
    flow = built[0] if isinstance(built, tuple) and built else built
    if not isinstance(flow, Flow):
        raise TypeError(f"{spec} returned {type(built).__name__}, not an es.Flow")
    return flow


@contextmanager
def _current_folder_on_path() -> Iterator[None]:
    """The current folder first on ``sys.path`` for a while (the ``elastream`` script's own folder is there)."""
    folder = os.getcwd()
    if folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)


def _import_module(name: str, func: str) -> Any:
    """Import module ``name``; when it cannot be found, say where it was looked for and what else to write."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
            raise ImportError(f"importing {name!r} failed: {exc}") from exc  # the module itself is there
        file = name.replace(".", "/") + ".py"
        raise ModuleNotFoundError(
            f"no module {name!r}: looked in the current folder ({os.getcwd()}) and on Python's path; run from "
            f"the folder that holds {file}, or give the file's path: path/to/{file}:{func}", name=name) from None


def _load_file(path: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"_elastream_placement_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report_dict(flow: Flow, graph: PlacementGraph, plan: PlacementPlan, baseline: PlacementPlan,
                factor: float) -> dict[str, Any]:
    """The JSON report: the graph's size, the plan and the round-robin baseline."""
    return {"flow": flow.name, "processes": plan.processes, "factor": factor,
            "graph": {"tasks": len(graph), "edges": len(graph.traffic), "total_weight": graph.total_weight,
                      "total_traffic": graph.total_traffic},
            "plan": plan.to_dict(), "round_robin": baseline.to_dict()}


def print_report(console: Console, flow: Flow, graph: PlacementGraph, plan: PlacementPlan,
                 baseline: PlacementPlan, factor: float) -> None:
    """Operator table, process table and the cut-traffic comparison."""
    console.print(f"[bold]placement[/] of flow {flow.name!r}: {len(graph)} operators, {len(graph.traffic)} streams "
                  f"onto {plan.processes} processes — consolidation level {plan.level} "
                  f"({plan.parent_tasks} parent tasks), factor {factor:g}"
                  + ("" if plan.balanced else " [yellow](not balanced within the factor)[/]"))
    console.print(_operator_table(flow, plan))
    console.print(_process_table(plan))
    saved = 1 - plan.cut_traffic / baseline.cut_traffic if baseline.cut_traffic > 0 else 0.0
    console.print(f"cut traffic {plan.cut_traffic:,.4g} of {plan.total_traffic:,.4g} "
                  f"({plan.cut_fraction:.1%} crosses processes), imbalance {plan.imbalance:.3f}")
    console.print(f"round-robin baseline: cut traffic {baseline.cut_traffic:,.4g} ({baseline.cut_fraction:.1%}), "
                  f"imbalance {baseline.imbalance:.3f} — placement cuts {saved:.1%} less traffic")
    if plan.empty_processes:
        console.print(f"[yellow]processes {', '.join(map(str, plan.empty_processes))} run nothing[/]: "
                      "more processes than the flow can use")
    console.print("[dim]offline estimate: load = cost_us × tuples per period (one tuple per source), "
                  "traffic = tuples per period[/]")


def _operator_table(flow: Flow, plan: PlacementPlan) -> Table:
    table = Table(title="operator → process")
    table.add_column("operator")
    table.add_column("description")
    for col in ("process", "load", "share"):
        table.add_column(col, justify="right")
    total = sum(plan.load_per_process)
    for name, process in sorted(plan.assignment.items(), key=lambda item: item[1]):  # stable: canonical order
        load = plan.task_load[name]
        table.add_row(name, flow[name].operator.describe(), str(process), f"{load:,.4g}",
                      f"{load / total:.1%}" if total > 0 else "-")
    return table


def _process_table(plan: PlacementPlan) -> Table:
    table = Table(title=f"load per process (imbalance {plan.imbalance:.3f})")
    for col in ("process", "operators", "load", "share"):
        table.add_column(col, justify="right")
    total = sum(plan.load_per_process)
    for p, load in enumerate(plan.load_per_process):
        table.add_row(str(p), str(len(plan.tasks_on(p))), f"{load:,.4g}", f"{load / total:.1%}" if total > 0 else "-")
    return table
