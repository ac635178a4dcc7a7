"""``elastream bench topology``: C-Stream §5.1 "number of threads" experiment (Figs. 4–5).

For one topology (chain, data-parallel, tree, reverse-tree) of ``es.ops.Busy``
operators, runs every (policy, threads) pair and reports throughput at the
sink and mean / p99 end-to-end latency (source-stamped, sink-measured).

By default each run lasts ``--seconds`` and is then shut down; only tuples
reaching the sink after ``--warmup`` seconds count (steady state). With
``--tuples N`` each run instead processes N tuples to completion.
Every row also gives ``cores_used`` (process CPU seconds per wall second),
which shows whether threads ran Python in parallel (GIL case ``release``) or
took turns (``hold``). Operator fusion is off (``SchedulingConfig(fuse=False)``):
the policies under test choose between operators, which a fused chain would hide.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine
from elastream.workloads.measure import measure_run
from elastream.workloads.topologies import TOPOLOGIES, build_topology

GIL_NOTES = {
    "hold": "GIL case: hold — Busy spins in pure Python holding the GIL; threads take turns on one core.",
    "release": "GIL case: release — Busy hashes in C with the GIL released; threads can use both cores.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench topology``."""
    parser.add_argument("--topology", choices=TOPOLOGIES, default="chain")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="worker thread counts")
    parser.add_argument("--policy", default="all", help="a policy name, or 'all' (default)")
    parser.add_argument("--cost-us", type=float, default=100.0, help="Busy cost per tuple (µs)")
    parser.add_argument("--selectivity", type=float, default=1.0, help="Busy selectivity")
    parser.add_argument("--gil", choices=("hold", "release"), default="hold", help="Busy GIL case")
    parser.add_argument("--ops", type=int, default=12, help="Busy operators of chain / data-parallel")
    parser.add_argument("--depth", type=int, default=6, help="tree depth (2**depth - 1 Busy operators)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=None, help="seconds per run (default 3)")
    budget.add_argument("--tuples", type=int, default=None, help="tuples per run, run to completion")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds excluded at the start (with --seconds)")
    parser.add_argument("--queue-size", type=int, default=32, help="Runner max_queue_size (tuples per port)")
    parser.add_argument("--batch-size", type=int, default=32, help="Runner batch_size")
    parser.add_argument("--plot", metavar="PNG", default=None, help="draw throughput and latency vs threads")


def _policies(name: str) -> list[str]:
    available = es.policies.available()
    if name == "all":
        return available
    if name not in available:
        raise SystemExit(f"unknown policy {name!r}; choose 'all' or one of: {', '.join(available)}")
    return [name]


def run_one(args: argparse.Namespace, policy: str, threads: int, seconds: float | None) -> dict[str, Any]:
    """Build the topology afresh, run it once with (policy, threads), return one result row."""
    flow, sink = build_topology(args.topology, n_tuples=args.tuples, cost_us=args.cost_us,
                                selectivity=args.selectivity, gil=args.gil, ops=args.ops, depth=args.depth,
                                seconds=seconds)
    # Fusion off: the policies rank operators, so every operator must be a task of its own.
    runner = es.Runner(threads=threads, policy=policy, max_queue_size=args.queue_size, batch_size=args.batch_size,
                       seed=0, scheduling=es.SchedulingConfig(fuse=False))
    m = measure_run(runner, flow, sink, seconds=seconds, warmup_s=args.warmup if seconds else 0.0)
    return {"policy": policy, "threads": threads, "throughput_tuples_per_s": m.throughput,
            "mean_latency_ms": m.latency["mean_ms"], "p99_latency_ms": m.latency["p99_ms"],
            "latency_trend": m.latency_trend, "tuples": m.tuples, "window_s": m.window_s,
            "cores_used": m.cores_used}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the (policy, threads) sweep; return the result as a JSON-ready dict."""
    seconds = args.seconds if args.seconds is not None or args.tuples is not None else 3.0
    if seconds is not None and not 0 <= args.warmup < seconds:
        raise SystemExit(f"--warmup ({args.warmup}) must be below --seconds ({seconds})")
    rows = []
    for policy in _policies(args.policy):
        for threads in args.threads:
            print(f"topology {args.topology}: policy {policy}, {threads} threads …", file=sys.stderr, flush=True)
            rows.append(run_one(args, policy, threads, seconds))
    result = {
        "benchmark": "topology", "topology": args.topology, "gil": args.gil, "note": GIL_NOTES[args.gil],
        "cost_us": args.cost_us, "selectivity": args.selectivity,
        "busy_operators": args.ops if args.topology in ("chain", "data-parallel") else 2 ** args.depth - 1,
        "seconds": seconds, "warmup_s": args.warmup if seconds else 0.0, "tuples": args.tuples,
        "queue_size": args.queue_size, "batch_size": args.batch_size, "results": rows, "machine": machine(),
    }
    if args.plot:
        result["plot"] = plot(result, args.plot)
    return result


def plot(result: dict[str, Any], path: str) -> str:
    """Draw throughput and mean latency against threads, one line per policy; return ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tp, ax_lat) = plt.subplots(1, 2, figsize=(11, 4))
    for policy in dict.fromkeys(r["policy"] for r in result["results"]):
        rows = [r for r in result["results"] if r["policy"] == policy]
        xs = [r["threads"] for r in rows]
        ax_tp.plot(xs, [r["throughput_tuples_per_s"] for r in rows], marker="o", label=policy)
        ax_lat.plot(xs, [r["mean_latency_ms"] or float("nan") for r in rows], marker="o", label=policy)
    threads = sorted({r["threads"] for r in result["results"]})
    ax_tp.set(xlabel="threads", ylabel="tuples/s", title="throughput", xticks=threads)
    ax_lat.set(xlabel="threads", ylabel="ms", title="mean latency", xticks=threads)
    ax_tp.set_ylim(bottom=0)
    ax_lat.set_ylim(bottom=0)
    ax_lat.legend(fontsize="small")
    fig.suptitle(f"{result['topology']}, Busy {result['cost_us']:g} µs, s={result['selectivity']:g}, "
                 f"GIL {result['gil']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table."""
    budget = (f"{result['seconds']:g} s per run, first {result['warmup_s']:g} s excluded"
              if result["seconds"] else f"{result['tuples']:,} tuples per run")
    table = Table(title=f"{result['topology']}: {result['busy_operators']} Busy({result['cost_us']:g} µs, "
                        f"s={result['selectivity']:g}), GIL {result['gil']}, {budget}")
    table.add_column("policy")
    for col in ("threads", "tuples/s", "mean latency ms", "p99 latency ms", "latency trend", "tuples",
                "cores used"):
        table.add_column(col, justify="right")
    last = None
    for r in result["results"]:
        if last is not None and r["policy"] != last:
            table.add_section()
        last = r["policy"]
        table.add_row(r["policy"], str(r["threads"]), fmt(r["throughput_tuples_per_s"], 0),
                      fmt(r["mean_latency_ms"]), fmt(r["p99_latency_ms"]), fmt(r["latency_trend"], 2),
                      f"{r['tuples']:,}", f"{r['cores_used']:.2f}")
    console.print(table)
    console.print(result["note"])
    console.print("latency trend: mean latency of the later half of the window over the earlier half "
                  "(≈1: steady state; >1: queues still filling, so the run was too short for this shape).")
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")
