"""``elastream bench latency``: end-to-end latency of a small pipeline at a fixed input rate.

``RateLimited`` source (``--rate`` tuples/s for ``--seconds``) → parse → running
count keyed by ``value % 100`` → format → latency sink. Reports p50 / p99 / max
latency (ms, stamped at emission, measured at the sink) and the achieved
throughput against the target rate. Every stage is pure Python (GIL held).
A last row runs plain ``es.Runner()`` (elastic; ``--no-default-row`` leaves it out).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine, timed
from elastream.workloads.latency import build_latency_flow
from elastream.workloads.measure import summarize

#: The row of plain ``es.Runner()`` (elastic, every default), in place of a thread count.
DEFAULT_ROW = "Runner()"
GIL_NOTE = "GIL case: hold — every stage is pure Python; threads take turns on one core."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench latency``."""
    parser.add_argument("--rate", type=float, default=5000.0, help="target input rate, tuples/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the source emits")
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="worker thread counts")
    parser.add_argument("--policy", default="least_recently_run", help="scheduling policy")
    parser.add_argument("--default-row", action=argparse.BooleanOptionalAction, default=True,
                        help="also run plain es.Runner() as a user writes it (elastic, every default)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the pipeline once per thread count; return the result as a JSON-ready dict."""
    rows = []
    configs: list[Any] = list(args.threads) + ([DEFAULT_ROW] if getattr(args, "default_row", False) else [])
    for threads in configs:
        flow, sink = build_latency_flow(rate=args.rate, seconds=args.seconds)
        runner = es.Runner() if threads == DEFAULT_ROW else es.Runner(threads=threads, policy=args.policy)
        t = timed(lambda: runner.run(flow))
        samples = t.value.outputs[sink]
        span = samples.last_arrival - samples.first_arrival
        achieved = (samples.count - 1) / span if span > 0 else None
        lat = summarize(samples)
        rows.append({"threads": threads, "tuples": samples.count, "target_rate": args.rate,
                     "achieved_tuples_per_s": achieved,
                     "achieved_over_target": achieved / args.rate if achieved is not None else None,
                     "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "max_ms": lat["max_ms"],
                     "mean_ms": lat["mean_ms"], "elapsed_s": t.value.elapsed_s, "cores_used": t.cores_used})
    return {"benchmark": "latency", "gil": "hold", "note": GIL_NOTE, "rate": args.rate, "seconds": args.seconds,
            "policy": args.policy, "results": rows, "machine": machine()}


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table."""
    table = Table(title=f"latency: {result['rate']:,.0f} tuples/s for {result['seconds']:g} s, "
                        f"policy {result['policy']}")
    for col in ("threads", "tuples", "achieved tuples/s", "of target", "p50 ms", "p99 ms", "max ms", "cores used"):
        table.add_column(col, justify="right")
    for r in result["results"]:
        ratio = r["achieved_over_target"]
        table.add_row(str(r["threads"]), f"{r['tuples']:,}", fmt(r["achieved_tuples_per_s"], 0),
                      "-" if ratio is None else f"{ratio:.1%}", fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3),
                      fmt(r["max_ms"], 3), f"{r['cores_used']:.2f}")
    console.print(table)
    console.print(result["note"])
