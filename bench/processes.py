"""``elastream bench processes``: the 12-operator Busy chain on 1 and 2 worker processes.

C-Stream §5.1's chain (12 ``Busy(100 µs, gil="hold")`` operators) run by the
multi-process runtime (issue 3) with P = 1 and P = 2 processes, placement by
TurboStream §V. Pure-Python operators hold the GIL, so only processes add CPU
parallelism. Reports steady-state throughput (tuples reaching the sink after a
warm-up that covers process start), the speed-up over P = 1, and the fraction
of the P-core ideal ``P / (12 × cost)`` — 1,667 tuples/s at P = 2.
``--placement auto round_robin`` runs each process count under both placement
plug-ins (TurboStream Fig. 9: its placement against round-robin).

Then the latency of a cross-process hop in the engine: a light flow
``RateLimited(stamped) → map → LatencySink`` at ``--hop-rate`` tuples/s, once in
one process and once with the middle ``map`` in a second process (two hops,
there and back); half the p50 difference is one hop (ring write, the
receiver's wake-up through the ring's wake pipe, both processes' scheduling).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine
from elastream.workloads.measure import LatencySink, measure_run, percentile
from elastream.workloads.topologies import build_topology

GIL_NOTE = ("GIL case: hold — Busy spins in pure Python; threads cannot overlap it, worker processes can "
            "(one core each).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench processes``."""
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts")
    parser.add_argument("--threads", type=int, default=1, help="worker threads per process")
    parser.add_argument("--ops", type=int, default=12, help="Busy operators in the chain")
    parser.add_argument("--cost-us", type=float, default=100.0, help="Busy cost per tuple (µs)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds excluded at the start (process start)")
    parser.add_argument("--queue-size", type=int, default=128, help="Runner max_queue_size")
    parser.add_argument("--batch-size", type=int, default=32, help="Runner batch_size")
    parser.add_argument("--start-method", choices=("forkserver", "spawn"), default="forkserver",
                        help="how workers start (the Runner's default: forkserver)")
    parser.add_argument("--placement", nargs="+", choices=("auto", "round_robin"), default=["auto"],
                        help="placement plug-ins to compare (TurboStream Fig. 9: auto vs round_robin)")
    parser.add_argument("--hop-rate", type=float, default=200.0, help="tuples/s of the hop-latency flow")
    parser.add_argument("--hop-tuples", type=int, default=400, help="tuples of the hop-latency flow (0: skip it)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chain once per process count; return the JSON-ready result."""
    rows = []
    for p, placement in ((p, placement) for p in args.processes for placement in args.placement):
        flow, sink = build_topology("chain", n_tuples=None, cost_us=args.cost_us, selectivity=1.0, gil="hold",
                                    ops=args.ops, seconds=args.seconds)
        runner = es.Runner(threads=args.threads, processes=p, max_queue_size=args.queue_size,
                           batch_size=args.batch_size, placement=placement,
                           process_options=es.ProcessConfig(start_method=args.start_method))
        m = measure_run(runner, flow, sink, seconds=args.seconds, warmup_s=args.warmup)
        ideal = p / (args.ops * args.cost_us * 1e-6)
        rows.append({"processes": p, "placement": placement, "threads": args.threads,
                     "throughput_tuples_per_s": m.throughput,
                     "ideal_tuples_per_s": ideal, "fraction_of_ideal": m.throughput / ideal,
                     "p50_latency_ms": m.latency["p50_ms"], "p99_latency_ms": m.latency["p99_ms"],
                     "tuples": m.tuples, "window_s": m.window_s})
    base = rows[0]["throughput_tuples_per_s"] if rows else 0.0
    for r in rows:
        r["speedup_vs_first"] = r["throughput_tuples_per_s"] / base if base else None
    return {"benchmark": "processes", "gil": "hold", "note": GIL_NOTE, "ops": args.ops, "cost_us": args.cost_us,
            "seconds": args.seconds, "warmup_s": args.warmup, "results": rows,
            "hops": hop_latency(args) if args.hop_tuples > 0 else None, "machine": machine()}


def _pass(stamped: tuple) -> tuple:
    return stamped


def hop_latency(args: argparse.Namespace) -> dict[str, Any]:
    """p50 / p99 latency of the light flow in one process and across two (two hops); one hop's p50."""
    runs = {}
    for label, placement in (("one process", None), ("two hops", {"src": 0, "hop": 1, "out": 0})):
        flow = es.Flow("hops")
        (flow.source(es.ops.RateLimited(range(args.hop_tuples), rate=args.hop_rate, stamp=True), name="src")
             .map(_pass, name="hop").sink(LatencySink(stamp_index=0), name="out"))
        kw = {} if placement is None else {"processes": 2, "placement": placement}
        samples = es.Runner(**kw).run(flow, timeout=120).outputs["out"]
        ages = sorted(samples.latencies_s[args.hop_tuples // 10:])  # past the start
        runs[label] = {"p50_us": 1e6 * percentile(ages, 50), "p99_us": 1e6 * percentile(ages, 99), "n": len(ages)}
    one_hop = (runs["two hops"]["p50_us"] - runs["one process"]["p50_us"]) / 2
    return {"rate": args.hop_rate, "runs": runs, "one_hop_p50_us": one_hop}


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table."""
    table = Table(title=f"chain of {result['ops']} Busy({result['cost_us']:g} µs, gil=hold) over worker processes")
    for col in ("processes", "placement", "tuples/s", "ideal tuples/s", "fraction of ideal", "speed-up", "p50 ms",
                "p99 ms"):
        table.add_column(col, justify="right")
    for r in result["results"]:
        table.add_row(str(r["processes"]), r.get("placement", "auto"), fmt(r["throughput_tuples_per_s"], 0),
                      fmt(r["ideal_tuples_per_s"], 0),
                      f"{r['fraction_of_ideal']:.3f}", f"{r['speedup_vs_first']:.2f}",
                      fmt(r["p50_latency_ms"]), fmt(r["p99_latency_ms"]))
    console.print(table)
    hops = result.get("hops")
    if hops:
        one, two = hops["runs"]["one process"], hops["runs"]["two hops"]
        console.print(f"cross-process hop at {hops['rate']:g} tuples/s: one process p50 {one['p50_us']:.0f} µs "
                      f"(p99 {one['p99_us']:.0f}), there and back p50 {two['p50_us']:.0f} µs (p99 {two['p99_us']:.0f}): "
                      f"one hop adds {hops['one_hop_p50_us']:.0f} µs")
    console.print(result["note"])
