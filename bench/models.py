"""``elastream bench models``: threading models on 1,000 operators (IBM Streams §5, Figs. 8–9).

The paper's three graphs of 1,000 Busy operators (:mod:`elastream.workloads.large`): a pipeline,
a 1,000-wide data-parallel split, and the mixed graph (width 10, depth 100), each at three
per-tuple costs in floating-point operations. Every configuration runs the same flow:

* ``manual`` — ``Runner(model="manual")``: one thread, the flow fused wide;
* ``dedicated`` — ``Runner(model="dedicated")``: a thread per operator (1,000 threads);
* ``dynamic`` — plain ``Runner()``: the worker pool, elastic (the default a user gets);
* ``dynamic tN`` — ``Runner(threads=N)``: the pool at a fixed level ("dynamic static");
* ``default t8`` / ``ibm t8`` — ``Runner(threads=8, elastic=False)`` with fusion off under the
  default policy and under IBM's scheduler (``policy="ibm"``): the two disciplines side by side.

``--shapes c-stream-data-parallel`` runs C-Stream's 12-wide data-parallel topology
(:func:`~elastream.workloads.topologies.build_topology`) instead, its cost given in flops too: the
other graph the two schedulers are compared on.

As in the paper, the source emits as fast as the flow takes tuples, and only the run's last
``--window`` seconds count (the paper's final samples). Throughput is the work rate there: tuples
the Busy operators took in, over the operators a tuple passes (:func:`measure_once`); the sink's own
rate is reported too. ``cores used`` counts this process only (plain ``Runner()``'s worker processes
are not in it).

``--gil hold`` runs pure-Python Busy operators (threads cannot add CPU: only one runs Python at a
time), ``release`` hashes buffers with the GIL released (threads can use both cores), ``both`` runs
each. Repetitions interleave the configurations, the order reversed every other one; medians.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from time import perf_counter, process_time, sleep
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine
from elastream.workloads.large import data_parallel, flops_cost_us, mixed, pipeline
from elastream.workloads.topologies import build_topology

#: C-Stream's data-parallel topology (§5.1, Fig. 3): as wide as ``elastream bench topology``'s default.
CSTREAM_WIDTH = 12


def _cstream_data_parallel(*, n_tuples: int | None, seconds: float, flops: float, gil: str) -> tuple[es.Flow, str]:
    """C-Stream's data-parallel topology, its Busy cost given in flops like IBM's graphs."""
    return build_topology("data-parallel", n_tuples=n_tuples, seconds=seconds, cost_us=flops_cost_us(flops),
                          selectivity=1.0, gil=gil, ops=CSTREAM_WIDTH)


#: Per shape: the graph builder and the paper's costs (flops per tuple, §5.1–5.3). The last shape is not
#: IBM's: C-Stream's 12-wide data-parallel topology, the other graph the IBM scheduler is compared on.
SHAPES = {
    "pipeline": (lambda **kw: pipeline(1000, **kw), (1, 100, 1000)),
    "data-parallel": (lambda **kw: data_parallel(1000, **kw), (1, 10_000, 100_000)),
    "mixed": (lambda **kw: mixed(10, 100, **kw), (1, 100, 1000)),
    "c-stream-data-parallel": (_cstream_data_parallel, (1, 10_000)),
}
#: The shapes run when ``--shapes`` is not given: IBM's three graphs.
IBM_SHAPES = ["pipeline", "data-parallel", "mixed"]
#: Busy operators one tuple passes through, per shape.
DEPTH = {"pipeline": 1000, "data-parallel": 1, "mixed": 100, "c-stream-data-parallel": 1}
#: The work one batch's trip through the 1,000 operators should cost (``--batch-size auto``).
BATCH_TRIP_S = 0.05
GIL_NOTES = {
    "hold": "GIL held: pure-Python Busy operators; one thread runs Python at a time, so threads add no CPU.",
    "release": "GIL released: Busy hashes buffers without the GIL, so threads can use both cores.",
}


def configurations(static_threads: list[int], ibm_threads: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, Runner keywords) of every configuration, in the order they run."""
    configs = [("manual", {"model": "manual"}), ("dedicated", {"model": "dedicated"}), ("dynamic", {})]
    configs += [(f"dynamic t{n}", {"threads": n}) for n in static_threads]
    for policy in ("default", "ibm"):
        configs.append((f"{policy} t{ibm_threads}", {
            "threads": ibm_threads, "elastic": False, "scheduling": es.SchedulingConfig(fuse=False),
            "policy": "least_recently_run" if policy == "default" else "ibm"}))
    return configs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench models``."""
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=IBM_SHAPES,
                        help="graphs to run (default: IBM's three; c-stream-data-parallel is C-Stream's 12-wide one)")
    parser.add_argument("--flops", type=float, nargs="+", default=None,
                        help="costs per tuple (default: the paper's for each shape)")
    parser.add_argument("--gil", choices=("hold", "release", "both"), default="hold")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--window", type=float, default=4.0, help="the last seconds of each run that count")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="dynamic static levels")
    parser.add_argument("--ibm-threads", type=int, default=8, help="threads of the two scheduler rows")
    parser.add_argument("--configs", nargs="+", default=None, help="only these configuration labels")
    parser.add_argument("--batch-size", default="auto",
                        help="tuples per batch for every configuration; 'auto' (default): the batch whose trip "
                             "through 1,000 operators costs about 50 ms of work, at most the Runner's 512")
    parser.add_argument("--repeats", "--repeat", type=int, default=1,
                        help="runs of each configuration, interleaved; the tables give medians")
    parser.add_argument("--quick", action="store_true", help="pipeline only, costs 1 and 1000, 6 s runs")
    parser.add_argument("--plot", default=None, help="write a PNG here (one panel per shape and GIL case)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every (shape, GIL case, cost, configuration); return the JSON-ready result."""
    if args.quick:
        args.shapes, args.flops, args.seconds, args.window = ["pipeline"], [1, 1000], 6.0, 2.5
    if not 0 < args.window < args.seconds:
        raise SystemExit(f"--window ({args.window}) must be inside --seconds ({args.seconds})")
    configs = [c for c in configurations(args.threads, args.ibm_threads)
               if args.configs is None or c[0] in args.configs]
    gils = ["hold", "release"] if args.gil == "both" else [args.gil]
    cases = [(shape, gil, flops) for shape in args.shapes for gil in gils for flops in args.flops or SHAPES[shape][1]]
    rows = []
    with _progress(args, len(cases) * len(configs) * max(1, args.repeats)) as progress:
        for shape, gil, flops in cases:
            rows += _measure_case(shape, gil, flops, configs, args, progress)
    result = {"benchmark": "models", "seconds": args.seconds, "window_s": args.window, "repeats": args.repeats,
              "batch_size": args.batch_size,
              "batch_sizes": {f"{r['shape']} {r['flops']:g}": batch_for(r["shape"], r["flops"], args) for r in rows},
              "notes": {g: GIL_NOTES[g] for g in gils}, "results": rows, "ratios": ratios(rows),
              "machine": machine()}
    if args.plot:
        from elastream.bench._models_plot import plot

        result["plot"] = plot(result, args.plot)
    return result


def _progress(args: argparse.Namespace, total: int) -> Any:
    """A progress bar on stderr over every run (none when another command's bar is showing: ``progress=False``)."""
    if not getattr(args, "progress", True):
        return contextlib.nullcontext(None)
    from elastream.bench._spark_progress import BenchProgress

    return BenchProgress(total, description="elastream bench models")


def _measure_case(shape: str, gil: str, flops: float, configs: list, args: argparse.Namespace,
                  progress: Any = None) -> list[dict]:
    """Every configuration on one (shape, GIL case, cost), interleaved over the repeats; one row each."""
    runs: dict[str, list[dict]] = {label: [] for label, _ in configs}
    batch = batch_for(shape, flops, args)
    for r in range(max(1, args.repeats)):
        order = configs if r % 2 == 0 else configs[::-1]
        for label, options in order:
            step = progress.working(f"{shape}, GIL {gil}, {flops:g} flops: {label}") if progress else _quiet()
            with step:
                runs[label].append(measure_once(shape, gil, flops, {**options, "batch_size": batch},
                                                args.seconds, args.window))
    rows = []
    for label, _ in configs:
        rates = [m["tuples_per_s"] for m in runs[label]]
        rows.append({"shape": shape, "gil": gil, "flops": flops, "config": label,
                     "tuples_per_s": statistics.median(rates), "repeats": rates,
                     "sink_tuples_per_s": statistics.median(m["sink_tuples_per_s"] for m in runs[label]),
                     "cores_used": statistics.median(m["cores_used"] for m in runs[label])})
    return rows


def _quiet() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext(None)


def batch_for(shape: str, flops: float, args: argparse.Namespace) -> int:
    """The batch size of a run: ``--batch-size``, or with 'auto' the batch whose trip through the shape's
    operators costs about :data:`BATCH_TRIP_S` of work (the paper runs tuple at a time; a 512-tuple
    batch at 1,000 flops would take 10 s through the pipeline, longer than the measured window)."""
    if args.batch_size != "auto":
        return int(args.batch_size)
    per_tuple_s = DEPTH[shape] * max(flops_cost_us(flops), 0.1) * 1e-6
    return max(1, min(512, int(BATCH_TRIP_S / per_tuple_s)))


def measure_once(shape: str, gil: str, flops: float, options: dict, seconds: float, window: float) -> dict:
    """Run one configuration for ``seconds``; its rates over the last ``window`` seconds.

    ``tuples_per_s``: the work rate — tuples the Busy operators took in over the window, divided by the
    operators one tuple passes (:data:`DEPTH`): the flow's rate once it has filled (IBM Fig. 10 counts all
    operators' tuples too). The sink's own rate (``sink_tuples_per_s``) moves in whole batches and misses a
    pipeline still filling.
    """
    flow, sink = SHAPES[shape][0](n_tuples=None, seconds=seconds + 30.0, flops=flops, gil=gil)
    busy = [name for name in flow.operators if name.startswith("busy_")]
    cpu0, t0 = process_time(), perf_counter()
    handle = es.Runner(**options).start(flow)
    _sleep_until(handle, t0 + seconds - window)
    first = _work(handle, busy)
    _sleep_until(handle, t0 + seconds)
    last, stop = _work(handle, busy), perf_counter()
    result = handle.shutdown(timeout=30.0) if not handle.done else handle.wait(30.0)
    cpu, wall = process_time() - cpu0, perf_counter() - t0
    span = max(stop - (t0 + seconds - window), 1e-9)
    sink_count = result.outputs[sink].window(stop - span, stop).count
    return {"tuples_per_s": (last - first) / DEPTH[shape] / span, "sink_tuples_per_s": sink_count / span,
            "cores_used": cpu / wall if wall > 0 else 0.0}


def _sleep_until(handle: es.RunHandle, instant: float) -> None:
    while perf_counter() < instant and not handle.done:
        sleep(0.02)  # polling the run's time budget


def _work(handle: es.RunHandle, busy: list[str]) -> int:
    """Tuples the Busy operators have taken in so far."""
    operators = handle.stats().operators
    return sum(operators[name].tuples_in for name in busy if name in operators)


def ratios(rows: list[dict]) -> list[dict]:
    """Per (shape, GIL case, cost): dynamic ÷ dedicated, dynamic ÷ manual and ibm ÷ default (None: a side is 0)."""
    cases: dict[tuple, dict[str, float]] = {}
    for r in rows:
        cases.setdefault((r["shape"], r["gil"], r["flops"]), {})[r["config"]] = r["tuples_per_s"]
    out = []
    for (shape, gil, flops), rate in cases.items():
        ibm = next((k for k in rate if k.startswith("ibm ")), None)
        default = next((k for k in rate if k.startswith("default ")), None)
        out.append({"shape": shape, "gil": gil, "flops": flops,
                    "dynamic_over_dedicated": _ratio(rate.get("dynamic"), rate.get("dedicated")),
                    "dynamic_over_manual": _ratio(rate.get("dynamic"), rate.get("manual")),
                    "ibm_over_default": _ratio(rate.get(ibm or ""), rate.get(default or ""))})
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_report(result: dict[str, Any], console: Console) -> None:
    """Throughput per configuration and the ratios, as rich tables."""
    table = Table(title=f"threading models on Busy operators: work rate (operator tuples / depth) over the last "
                        f"{result['window_s']:g} s of {result['seconds']:g} s runs (median of {result['repeats']})")
    for col in ("shape", "GIL", "flops", "config", "tuples/s", "at the sink", "cores used"):
        table.add_column(col, justify="left" if col in ("shape", "GIL", "config") else "right")
    last = None
    for r in result["results"]:
        case = (r["shape"], r["gil"], r["flops"])
        if last is not None and case != last:
            table.add_section()
        last = case
        table.add_row(r["shape"], r["gil"], f"{r['flops']:g}", r["config"], fmt(r["tuples_per_s"], 1),
                      fmt(r["sink_tuples_per_s"], 1), f"{r['cores_used']:.2f}")
    console.print(table)
    ratio_table = Table(title="ratios (same run)")
    for col in ("shape", "GIL", "flops", "dynamic ÷ dedicated", "dynamic ÷ manual", "ibm ÷ default"):
        ratio_table.add_column(col, justify="right")
    for r in result["ratios"]:
        ratio_table.add_row(r["shape"], r["gil"], f"{r['flops']:g}", *(
            "-" if r[k] is None else f"{r[k]:.2f}"
            for k in ("dynamic_over_dedicated", "dynamic_over_manual", "ibm_over_default")))
    console.print(ratio_table)
    for note in result["notes"].values():
        console.print(note)
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")
