"""``elastream bench latency``: end-to-end latency of a small pipeline at a fixed input rate.

``RateLimited`` source (``--rate`` tuples/s for ``--seconds``) → parse → running
count keyed by ``value % 100`` → format → latency sink. Reports p50 / p99 / max
latency (ms, stamped at emission, measured at the sink) and the achieved
throughput against the target rate. Every stage is pure Python (GIL held).
A last row runs plain ``es.Runner()`` (elastic; ``--no-default-row`` leaves it out).

``--repeats N`` runs every row N times, interleaved (the order reversed every other
repeat, so a drift of the machine's load weighs on every row alike), and reports
each row's medians over its repeats; ``p99_ms_each`` keeps every repeat's p99 and
``p99_over_first`` each row's median p99 against the first row's (the ratio issue
20's latency goal reads: plain ``Runner()`` against ``threads=1``, repeat by repeat).
"""

from __future__ import annotations

import argparse
from statistics import median
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
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of every row, interleaved (order reversed every other repeat); medians reported")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the pipeline once per thread count and repeat; return the result as a JSON-ready dict."""
    configs: list[Any] = list(args.threads) + ([DEFAULT_ROW] if getattr(args, "default_row", False) else [])
    repeats = max(1, getattr(args, "repeats", 1))
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
    for repeat in range(repeats):
        order = list(range(len(configs)))
        for i in order if repeat % 2 == 0 else order[::-1]:
            runs[i].append(run_once(configs[i], args))
    rows = [median_row(runs[i]) for i in range(len(configs))]
    first = rows[0]["p99_ms"] if rows else None
    for row in rows:
        row["p99_over_first"] = row["p99_ms"] / first if first else None
    return {"benchmark": "latency", "gil": "hold", "note": GIL_NOTE, "rate": args.rate, "seconds": args.seconds,
            "policy": args.policy, "repeats": repeats, "results": rows, "machine": machine()}


def run_once(threads: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the pipeline on ``threads`` worker threads (or plain ``es.Runner()``): one result row."""
    flow, sink = build_latency_flow(rate=args.rate, seconds=args.seconds)
    runner = es.Runner() if threads == DEFAULT_ROW else es.Runner(threads=threads, policy=args.policy)
    t = timed(lambda: runner.run(flow))
    samples = t.value.outputs[sink]
    span = samples.last_arrival - samples.first_arrival
    achieved = (samples.count - 1) / span if span > 0 else None
    lat = summarize(samples)
    return {"threads": threads, "tuples": samples.count, "target_rate": args.rate,
            "achieved_tuples_per_s": achieved,
            "achieved_over_target": achieved / args.rate if achieved is not None else None,
            "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "max_ms": lat["max_ms"],
            "mean_ms": lat["mean_ms"], "elapsed_s": t.value.elapsed_s, "cores_used": t.cores_used}


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a configuration's repeats: the median of each measured number, every repeat's p99 kept."""
    row = dict(runs[-1])
    row["tuples"] = min(r["tuples"] for r in runs)  # the same in every repeat unless one lost some
    for key in ("achieved_tuples_per_s", "achieved_over_target", "p50_ms", "p99_ms", "max_ms", "mean_ms",
                "elapsed_s", "cores_used"):
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = median(values) if values else None
    row["p99_ms_each"] = [r["p99_ms"] for r in runs]
    return row


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table."""
    repeats = result.get("repeats", 1)
    table = Table(title=f"latency: {result['rate']:,.0f} tuples/s for {result['seconds']:g} s, "
                        f"policy {result['policy']}" + (f", medians of {repeats} repeats" if repeats > 1 else ""))
    for col in ("threads", "tuples", "achieved tuples/s", "of target", "p50 ms", "p99 ms", "max ms", "cores used"):
        table.add_column(col, justify="right")
    for r in result["results"]:
        ratio = r["achieved_over_target"]
        table.add_row(str(r["threads"]), f"{r['tuples']:,}", fmt(r["achieved_tuples_per_s"], 0),
                      "-" if ratio is None else f"{ratio:.1%}", fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3),
                      fmt(r["max_ms"], 3), f"{r['cores_used']:.2f}")
    console.print(table)
    console.print(result["note"])
