"""``elastream bench elastic``: the elastic runner against the best static configuration (issue 20 item 8).

Shapes (C-Stream §5.2 Figs. 9–11, IBM elastic scheduler §5.4 Fig. 10), each in a
pure-Python (``gil="hold"``) and a GIL-releasing (``gil="release"``) variant, run
in load phases: the source switches phase on a clock, and the busy operators'
cost per tuple follows the phase each tuple carries (see ``_elastic_flows``).

For every shape the same invocation runs the elastic configurations (plain
``es.Runner()``, and ``es.Runner(processes=p)`` for each p > 1 of the static
sweep's ``--processes``; for cstream-fig11 also C-Stream's adaptation — the
utilization thread controller with U_h 0.95 and 0.90, beside replica sizing) and a sweep of static ones
(``threads × processes × fusion``, and replicas of the busy operators over two
processes for the chains), interleaved and repeated in alternating order
(A B C, C B A, …, so drifting machine load favours none); medians
over repeats are reported. Per shape and phase: elastic ÷ best static throughput
in steady state, the periods the elastic run took to converge, its level changes
per 10 periods in steady state, the longest reconfiguration pause and the
timeline PNG. Every run's output is checked (count; order for the chains).

With two processes in the sweep, one more static run, never ranked, runs the replicated layout plain
``Runner()`` settles on where it cannot move units whole (:func:`held_layout`): every unit replicated into
the worker, its split and merge in process 0. It shows what that layout costs against the best static
configuration (where DS2 moves units whole, as on C-Stream Fig. 11, plain ``Runner()`` does not use it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine
from elastream.bench._elastic_flows import SHAPES, SINK, SOURCE, Shape
from elastream.bench._elastic_measure import (check_output, convergence, drain_s, entries_by_phase, max_or_none,
                                              median_or_none, phase_arrivals, phase_emissions, phase_windows,
                                              SteadyRate, steady_rates, tuple_arrivals)
from elastream.elastic import register_controller
from elastream.elastic.combined import CombinedController
from elastream.elastic.units import replication_units
from elastream.graph.flow import Flow
from elastream.ordered.replicate import merge_name, replica_name, split_name

GILS = ("hold", "release")
#: C-Stream's adaptation (§4.1 threads by utilisation beside §4.2's replicas, here DS2's), U_h = 0.95 and
#: U_h = 0.90 for Fig. 11's two curves (U_l kept below it). The thread controller alone cannot add a core to
#: pure-Python operators; C-Stream's replicas are what reach the best static configuration there.
UH95 = "utilization+ds2"
UH90 = "utilization-uh90+ds2"
#: The static run of plain Runner()'s settled layout (:func:`held_layout`).
HELD_LAYOUT = "static held layout p=2"


@dataclass(frozen=True, slots=True)
class Config:
    """One way to run a shape: elastic (a controller) or static (fixed threads, processes, fusion, replicas)."""

    label: str
    elastic: bool
    threads: int | None = None
    processes: int | None = None
    fuse: bool = True
    replicas: bool = False
    controller: str = "auto"
    held_layout: bool = False
    """A static run of the layout plain ``Runner()`` settles on (:func:`held_layout`): never the best static
    configuration, but the elastic run ÷ this run is what the elastic mechanism costs, and this run ÷ the best
    static is what that layout costs."""

    def runner(self, shape: Shape) -> es.Runner:
        """The Runner for this configuration."""
        elastic: Any = es.Elastic(controller=self.controller) if self.elastic else False
        replicas = {name: 2 for name in shape.busy_names()} if self.replicas else None
        return es.Runner(threads=self.threads, processes=self.processes, elastic=elastic, replicas=replicas,
                         scheduling=es.SchedulingConfig(fuse=self.fuse))

    def prepared(self, shape: Shape, gil: str, phase_s: float) -> tuple[Flow, es.Runner]:
        """A fresh flow of ``shape`` and the Runner that runs it in this configuration."""
        flow = shape.build(gil, phase_s)
        if self.held_layout:
            return held_layout(flow, self.processes or 2)
        return flow, self.runner(shape)


def held_layout(flow: Flow, processes: int) -> tuple[Flow, es.Runner]:
    """Plain ``Runner()``'s layout once every unit has spread by replicas, as a static run: the flow's units
    (fused chains, replicable operators) with replica ``r`` of each in process ``r`` and everything else —
    the source, the sink, every unit's split and merge — in process 0, one thread per process.

    Plain ``Runner()`` holds worker processes ready and starts in one (:mod:`elastream.elastic.held`).
    Spreading a unit by replicas adds them in the other processes and keeps the split and the merge where
    the unit started; a static plan can give each process whole units instead, and so does DS2 where moving
    whole units evens the processes out (:func:`elastream.elastic.packing.whole_moves`). This run is the
    replicated layout, for units DS2 cannot move (one heavy fused chain, keyed units).
    """
    unit_flow, counts = replication_units(flow, processes)
    placement = {name: 0 for name in unit_flow.operators}
    for unit, count in counts.items():
        placement[split_name(unit)] = placement[merge_name(unit)] = 0
        placement.update({replica_name(unit, r): r % processes for r in range(count)})
    runner = es.Runner(threads=1, processes=processes, elastic=False, replicas=counts, placement=placement)
    return unit_flow, runner


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench elastic``."""
    parser.add_argument("--shape", nargs="+", choices=sorted(SHAPES), default=None, metavar="NAME",
                        help=f"shapes to run (default all: {', '.join(SHAPES)})")
    parser.add_argument("--gil", nargs="+", choices=GILS, default=list(GILS), help="Busy GIL variants")
    parser.add_argument("--quick", action="store_true",
                        help="short phases (6 periods) and one repeat: a smoke run, not a measurement")
    parser.add_argument("--phase-periods", type=int, default=None,
                        help="elastic periods per load phase (default 30; 6 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; 1 with --quick)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="static sweep: threads")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="static sweep: processes")
    parser.add_argument("--fuse", nargs="+", choices=("on", "off"), default=["on", "off"],
                        help="static sweep: fusion")
    parser.add_argument("--no-replicas", action="store_true", help="leave the replicated static runs out")
    parser.add_argument("--timeline", metavar="JSON", default=None,
                        help="write every elastic run's timeline (every repeat) to this JSON file")
    parser.add_argument("--png", metavar="DIR", default=None,
                        help="directory for the timeline PNGs (default: a directory under the temp dir)")


def configs_for(shape: Shape, args: argparse.Namespace) -> list[Config]:
    """The elastic configurations, then the static sweep, for one shape."""
    configs = [Config("elastic", True)]
    configs += [Config(f"elastic p={p}", True, processes=p) for p in args.processes if p > 1]
    if shape.name == "cstream-fig11":
        configs += [Config("elastic utilization U_h=0.95", True, controller=UH95),
                    Config("elastic utilization U_h=0.90", True, controller=UH90)]
    for processes in args.processes:
        for threads in args.threads:
            for fuse in args.fuse:
                configs.append(Config(f"static t={threads} p={processes} fuse={fuse}", False, threads, processes,
                                      fuse=fuse == "on"))
    if shape.ordered and not args.no_replicas:
        configs.append(Config("static t=1 p=2 replicas=2", False, 1, 2, replicas=True))
    if 2 in args.processes and not args.no_replicas:
        configs.append(Config(HELD_LAYOUT, False, 1, 2, held_layout=True))
    return configs


def phase_seconds(args: argparse.Namespace) -> tuple[float, int]:
    """(seconds per load phase, repeats) from the options."""
    periods = args.phase_periods or (6 if args.quick else 30)
    repeats = args.repeats or (1 if args.quick else 3)
    if periods < 1 or repeats < 1:
        raise SystemExit("--phase-periods and --repeats must be >= 1")
    return periods * es.Elastic().period_s, repeats


def run_one(shape: Shape, gil: str, config: Config, phase_s: float) -> dict[str, Any]:
    """Run ``shape`` once under ``config``; measure every phase, check the output."""
    flow, runner = config.prepared(shape, gil, phase_s)
    began = perf_counter()
    try:
        result = runner.run(flow, timeout=shape.phases * phase_s * 4 + 60)
    except Exception as error:  # noqa: BLE001 - one failed configuration must not lose the others' figures
        return {"config": config.label, "error": f"{type(error).__name__}: {error}"}
    ended = perf_counter()
    record = result.outputs[SINK]
    source = result.stats.operators.get(SOURCE)
    row: dict[str, Any] = {"config": config.label, "wall_s": ended - began, "tuples": record.count,
                           "drain_after_source_s": drain_s(record),
                           "check": check_output(record, source.tuples_out if source else None, shape.ordered)}
    row["phases"] = measure_phases(record, result, ended, phase_s, elastic=config.elastic)
    row["_timeline"] = result.timeline
    return row


def measure_phases(record: Any, result: Any, ended: float, phase_s: float, elastic: bool) -> list[dict[str, Any]]:
    """Per load phase: steady throughput and, for an elastic run, its convergence figures."""
    windows = phase_windows(record)
    arrivals = phase_arrivals(record)
    emissions = phase_emissions(record)
    arrived = tuple_arrivals(record)
    period_s = es.Elastic().period_s
    min_skip = min(2 * period_s, phase_s / 3)  # pipeline fill and drain after a change of load
    per_phase = [{} for _ in windows]
    if elastic and result.timeline is not None:
        run_start = ended - result.elapsed_s
        for slot, entries in zip(per_phase, entries_by_phase(result.timeline.entries, windows, run_start)):
            slot.update(convergence(entries))
    rows = []
    for i, (w, extra) in enumerate(zip(windows, per_phase)):
        converge = extra.get("converge_periods")
        skip = max(min_skip, (converge or 0) * period_s) if not elastic or converge is not None else phase_s / 2
        tail = min_skip if i + 1 < len(windows) else 0.0  # the next change of load reaching back
        rate = steady_rates(record, w, skip, arrivals, emissions, tail, arrived)
        with_tail = steady_rates(record, w, skip, arrivals, emissions, arrived=arrived)
        rows.append({"phase": w.phase, "window_s": w.span_s, "tuples": w.tuples,
                     "steady_tuples_per_s": rate.tuples_per_s, "steady_window_s": rate.seconds, "tail_s": tail,
                     # The earlier definitions' figures, to compare with reports made with them.
                     "with_tail_tuples_per_s": by_sink_window(with_tail),
                     "sink_window_tuples_per_s": by_sink_window(rate),
                     "sink_tuples_per_s": rate.sink_tuples_per_s, "source_tuples_per_s": rate.source_tuples_per_s,
                     **extra})
    return rows


def by_sink_window(rate: SteadyRate) -> float:
    """The steady rate by the earlier definition: the sink window's arrivals, or the source's rate if lower."""
    source = rate.source_tuples_per_s
    return rate.sink_window_tuples_per_s if source is None else min(rate.sink_window_tuples_per_s, source)


def run_shape(shape: Shape, gil: str, args: argparse.Namespace, phase_s: float, repeats: int) -> dict[str, Any]:
    """Every configuration of one shape and GIL case, interleaved and repeated; the rows and the summary."""
    configs = configs_for(shape, args)
    rows: list[dict[str, Any]] = []
    timelines: dict[str, Any] = {}
    for repeat in range(repeats):
        # Counterbalanced (A B C, C B A, …): a machine whose load drifts favours no configuration.
        for config in configs if repeat % 2 == 0 else configs[::-1]:
            print(f"{shape.name}/{gil}: {config.label} (repeat {repeat + 1}/{repeats}) …", file=sys.stderr,
                  flush=True)
            row = run_one(shape, gil, config, phase_s)
            timeline = row.pop("_timeline", None)
            if timeline is not None:
                timelines.setdefault(config.label, []).append((repeat, timeline))
            rows.append({"repeat": repeat, **row})
    return {"shape": shape.name, "gil": gil, "description": shape.description,
            "costs_us": [list(c) for c in shape.costs_us], "phase_s": phase_s, "runs": rows,
            "summary": summarize(configs, rows), "_timelines": timelines}


def summarize(configs: list[Config], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase: the best static configuration and every elastic one's ratio and convergence (medians)."""
    good = [r for r in rows if "error" not in r and r["check"] is None]
    phases = sorted({p["phase"] for r in good for p in r["phases"]})
    out = []
    for phase in phases:
        def medians(label: str, key: str) -> float | None:
            return median_or_none([p.get(key) for r in good if r["config"] == label
                                   for p in r["phases"] if p["phase"] == phase])
        static = {c.label: medians(c.label, "steady_tuples_per_s") for c in configs if not c.elastic}
        static = {k: v for k, v in static.items() if v is not None}
        layout = static.pop(HELD_LAYOUT, None)  # a diagnostic run, not a configuration to beat
        best = max(static, key=static.__getitem__) if static else None
        elastic = []
        for c in (c for c in configs if c.elastic):
            rate = medians(c.label, "steady_tuples_per_s")
            def ratio(key: str) -> float | None:
                mine, theirs = medians(c.label, key), medians(best, key) if best else None
                return mine / theirs if mine and theirs else None
            phase_rows = [p for r in good if r["config"] == c.label for p in r["phases"] if p["phase"] == phase]
            elastic.append({
                "config": c.label, "steady_tuples_per_s": rate,
                "ratio_to_best_static": rate / static[best] if rate and best else None,
                "ratio_to_held_layout": rate / layout if rate and layout else None,
                # The same ratio by the earlier definitions (figures to compare with reports made with them):
                # the sink window's arrivals with the tail counted, and without it.
                "ratio_with_tail": ratio("with_tail_tuples_per_s"),
                "ratio_sink_window": ratio("sink_window_tuples_per_s"),
                "converge_periods": medians(c.label, "converge_periods"),
                "converged_runs": sum(p.get("converge_periods") is not None for p in phase_rows),
                "runs": len(phase_rows),
                "steady_changes_per_10": max_or_none([p.get("steady_changes_per_10") for p in phase_rows]),
                "max_pause_ms": max_or_none([p.get("max_pause_ms") for p in phase_rows]),
                "not_applied": dict(sum((Counter(p.get("not_applied", {})) for p in phase_rows), Counter())),
                "steady_levels": next((p.get("steady_levels") for p in reversed(phase_rows)), None)})
        out.append({"phase": phase, "best_static": best, "best_static_tuples_per_s": static.get(best),
                    "static": static, "elastic": elastic, "held_layout_tuples_per_s": layout,
                    "held_layout_to_best_static": layout / static[best] if layout and best else None})
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen shapes; return the result as a JSON-ready dict."""
    register_controller(UH95, lambda **kw: CombinedController(threads="utilization", **kw))
    register_controller(UH90, lambda **kw: CombinedController(threads="utilization",
                                                               thread_options={"low": 0.80, "high": 0.90}, **kw))
    phase_s, repeats = phase_seconds(args)
    png_dir = Path(args.png) if args.png else Path(tempfile.gettempdir()) / "elastream-bench-elastic"
    before = machine()
    shapes = []
    all_timelines: dict[str, Any] = {}
    for name in args.shape or list(SHAPES):
        for gil in args.gil:
            result = run_shape(SHAPES[name], gil, args, phase_s, repeats)
            timelines = result.pop("_timelines")
            result["png"] = draw({label: runs[-1][1] for label, runs in timelines.items()}, png_dir, f"{name}-{gil}")
            all_timelines.update(timelines_by_key(f"{name}/{gil}", timelines))
            shapes.append(result)
    out = {"benchmark": "elastic", "phase_s": phase_s, "period_s": es.Elastic().period_s,
           "phase_periods": round(phase_s / es.Elastic().period_s), "repeats": repeats, "shapes": shapes,
           "machine_before": before, "machine": machine()}
    if args.timeline:
        from elastream.metrics.status import write_json_atomic

        out["timeline"] = str(write_json_atomic(args.timeline, {"timelines": all_timelines}))
    return out


def timelines_by_key(prefix: str, timelines: dict[str, list]) -> dict[str, Any]:
    """Every repeat's timeline as JSON: the last under ``prefix/label`` (the PNG's), earlier ones with
    `` (repeat N)`` after it, so that one odd repeat can be looked at, not only the last."""
    out = {}
    for label, runs in timelines.items():
        for i, (repeat, timeline) in enumerate(runs):
            last = i == len(runs) - 1
            out[f"{prefix}/{label}" + ("" if last else f" (repeat {repeat + 1})")] = timeline.to_json()
    return out


def draw(timelines: dict[str, Any], directory: Path, stem: str) -> dict[str, str]:
    """One PNG per elastic configuration's timeline (its last repeat); their paths by configuration."""
    paths = {}
    for label, timeline in timelines.items():
        slug = label.replace(" ", "_").replace("=", "").replace(".", "")
        path = timeline.plot(directory / f"{stem}-{slug}.png", title=f"{stem}: {label}")
        paths[label] = str(path)
    return paths


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as rich tables, one per shape and GIL case."""
    console.print(f"load phases of {result['phase_s']:g} s ({result['phase_periods']} elastic periods of "
                  f"{result['period_s']:g} s), {result['repeats']} interleaved repeat(s), medians; "
                  f"load average {result['machine_before']['load_average_1min']:.1f} before, "
                  f"{result['machine']['load_average_1min']:.1f} after, {result['machine']['cpus']} CPUs")
    for shape in result["shapes"]:
        console.print(shape_table(shape))
        bad = [r for r in shape["runs"] if "error" in r or r.get("check")]
        for r in bad:
            console.print(f"[red]{r['config']} (repeat {r['repeat'] + 1}): {r.get('error') or r['check']}[/red]")
        for r in (r for r in shape["runs"] if r.get("drain_after_source_s", 0) > 1.0):
            console.print(f"{r['config']} (repeat {r['repeat'] + 1}): the sink still received tuples "
                          f"{r['drain_after_source_s']:.1f} s after the source stopped (a backlog; not counted)")
        for line in backlog_notes(shape["runs"]):
            console.print(line)
        for phase in shape["summary"]:
            for e in phase["elastic"]:
                if e.get("not_applied"):
                    told = ", ".join(f"{k} ×{v}" for k, v in e["not_applied"].items())
                    console.print(f"phase {phase['phase']}, {e['config']}: proposed but not applied: {told}")
        for label, path in shape["png"].items():
            console.print(f"timeline PNG ({label}): {path}")
    if result.get("timeline"):
        console.print(f"timelines: {result['timeline']}")
    console.print("steady state: the tuples the source emitted after the phase's convergence (elastic) or its "
                  "first two periods (static) and before its last two (the next change of load reaching back), "
                  "per second as the source emitted them or as the sink received them, whichever is lower "
                  "(the JSON's ratio_sink_window and ratio_with_tail: the earlier definitions); "
                  "converged: at the phase's most common late level, ≤ 1 change per 10 periods from there on.")


#: Sink and source rates of one phase further apart than this factor are named in the report.
BACKLOG_NOTE_RATIO = 1.25


def backlog_notes(runs: list[dict[str, Any]]) -> list[str]:
    """One line per run phase whose sink and source rates disagree: a backlog filled or drained during it."""
    lines = []
    for r in runs:
        for p in r.get("phases", ()):
            sink, source = p.get("sink_tuples_per_s"), p.get("source_tuples_per_s")
            if not sink or not source or max(sink, source) <= BACKLOG_NOTE_RATIO * min(sink, source):
                continue
            what = "drained" if sink > source else "filled"
            lines.append(f"{r['config']} (repeat {r['repeat'] + 1}), phase {p['phase']}: the sink received "
                         f"{sink:,.0f} tuples/s, the source emitted {source:,.0f}/s (a backlog {what}; "
                         f"the lower counted)")
    return lines


def shape_table(shape: dict[str, Any]) -> Table:
    """One shape's table: per phase, the best static run and each elastic configuration against it."""
    costs = " → ".join("/".join(f"{c:g}" for c in sorted(set(p))) for p in shape["costs_us"])
    table = Table(title=f"{shape['shape']} (GIL {shape['gil']}): {shape['description']}; cost µs {costs}")
    for col in ("phase", "configuration", "tuples/s", "÷ best static", "periods to converge", "converged runs",
                "changes / 10 periods", "max pause ms", "steady levels"):
        table.add_column(col, justify="left" if col in ("configuration", "steady levels") else "right")
    for phase in shape["summary"]:
        table.add_section()
        table.add_row(str(phase["phase"]), f"best static: {phase['best_static']}",
                      fmt(phase["best_static_tuples_per_s"], 0), "1.00", "", "", "", "", "")
        if phase.get("held_layout_tuples_per_s"):
            table.add_row("", f"{HELD_LAYOUT} (diagnostic)", fmt(phase["held_layout_tuples_per_s"], 0),
                          fmt(phase["held_layout_to_best_static"], 2), "", "", "", "", "")
        for e in phase["elastic"]:
            levels = e["steady_levels"]
            table.add_row("", e["config"], fmt(e["steady_tuples_per_s"], 0), fmt(e["ratio_to_best_static"], 2),
                          fmt(e["converge_periods"], 0), f"{e['converged_runs']}/{e['runs']}",
                          fmt(e["steady_changes_per_10"], 1), fmt(e["max_pause_ms"], 1),
                          short_levels(levels))
    return table


def short_levels(levels: dict[str, Any] | None) -> str:
    """Threads per process and replicas, briefly (e.g. 't=[2] r={busy_0: 2}')."""
    if not levels:
        return "-"
    text = f"t={levels['threads']}"
    if levels.get("replicas"):
        text += " r=" + ",".join(f"{k}:{v}" for k, v in levels["replicas"].items())
    return text
