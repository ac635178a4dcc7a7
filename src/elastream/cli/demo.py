"""``elastream demo``: the main job — TPCx-BB on Spark and on elastream, answers checked against each other.

Default: :mod:`elastream.workloads.tpcxbb_demo` generates (once, cached) a
small TPCx-BB data set with the Spark job, computes the five reference answers
with Spark SQL, runs the five streaming pipelines on the local engine with a
live view each (:class:`~elastream.cli.live.LiveView`: rows read, tuples/s, and
per operator its queue fill, busy vs back-pressured time, workers, replicas and
an elastic run's decisions), checks every answer and prints a summary table
(rows, seconds, tuples/s, p50/p99 latency, match). Exit status 0 only when
every answer matches.

``--barrier`` runs the small Barrier flow over a generated CSV instead (no
Spark): the same live view while it runs, then a sample of the result, the
per-operator statistics and worker utilisation.

``--status FILE`` writes the running flow's status JSON
(:func:`~elastream.metrics.status.status_json`) to FILE at every sample of the
live view, for a monitoring system to poll. The live view samples on its own
thread; ``--json`` runs without it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.cli.live import LiveView
from elastream.cli.tables import operator_table, stats_dict, worker_table
from elastream.workloads.demo import build_demo_flow, cache_dir, write_sensor_csv
from elastream.workloads.tpcxbb_demo import QUERIES, DemoHooks, DemoOptions, DemoResult, DemoRow, run_demo

REFRESH_S = 0.25
"""The live view's sampling period: a few frames a second."""
WAIT_SLICE_S = 0.5


def add_parser(sub: Any) -> None:
    """Register ``demo`` on the top-level sub-parsers."""
    defaults = DemoOptions()
    p = sub.add_parser("demo", help="the main job: TPCx-BB on Spark and on elastream, answers checked",
                       description="Generate a small TPCx-BB data set on Spark (cached), answer the five queries "
                                   "with Spark SQL and with elastream's streaming pipelines, and compare.")
    p.add_argument("--scale", type=float, default=defaults.scale, help="TPCx-BB scale factor (default 0.05)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="data generator seed (default 0)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="worker threads (default 2)")
    p.add_argument("--processes", type=int, default=defaults.processes, help="worker processes (default 1)")
    p.add_argument("--policy", default=defaults.policy, help="scheduling policy")
    p.add_argument("--master", default=None, help="Spark master URL (default: local[*])")
    p.add_argument("--queries", nargs="+", choices=QUERIES, default=list(QUERIES), help="queries to run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--barrier", action="store_true", help="run the Barrier flow over a generated CSV instead (no Spark)")
    p.add_argument("--rows", type=int, default=200_000, help="--barrier: CSV rows (default 200,000)")
    p.add_argument("--status", type=Path, default=None, metavar="FILE",
                   help="write the running flow's status JSON to FILE a few times a second, for monitoring "
                        "(with the live view, so not with --json)")
    p.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Run the TPCx-BB demo (or the Barrier demo); 0 when every check passes."""
    from elastream.bench._common import make_console

    console = make_console()
    if args.barrier:
        return run_barrier(args, console)
    options = DemoOptions(scale=args.scale, seed=args.seed, threads=args.threads, processes=args.processes,
                          policy=args.policy, master=args.master, queries=tuple(args.queries))
    if args.json:
        result = run_demo(options, DemoHooks())
        print(json.dumps(result.summary(), indent=2))
    else:
        console.print(f"[bold]elastream demo[/]: TPCx-BB SF {options.scale:g} on Spark and on elastream")
        result = run_demo(options, _live_hooks(console, args.status))
        console.print(summary_table(result))
        verdict = "[green]every answer matches Spark's[/]" if result.all_match else "[red]answers differ[/]"
        console.print(verdict)
        for row in result.rows:
            if not row.match:
                console.print(f"[red]{row.query}[/]: {row.difference}")
    return 0 if result.all_match else 1


def _live_hooks(console: Console, status_path: Path | None = None) -> DemoHooks:
    """Displays for the demo's steps: Spark stage bars, a live view per local run, a line per result."""
    from elastream.spark.progress import StageProgress

    def datagen(spark: Any) -> Any:
        return StageProgress(spark, console)

    def phase(text: str) -> None:
        console.print(f"[bold cyan]→[/] {text}")

    def local_started(query: str, total_rows: int, handle: Any) -> None:
        _follow(console, query, total_rows, handle, status_path)

    def local_finished(row: DemoRow) -> None:
        mark = "[green]match[/]" if row.match else "[red]DIFFERS[/]"
        console.print(f"  {row.query}: {row.rows} rows in {row.seconds:.2f} s "
                      f"({row.tuples_per_second:,.0f} tuples/s), {mark}")

    return DemoHooks(datagen=datagen, phase=phase, local_started=local_started, local_finished=local_finished)


def _follow(console: Console, query: str, total_rows: int, handle: Any, status_path: Path | None) -> None:
    """The live view of one local run until it ends (the caller's thread waits; the view samples on its own)."""
    with LiveView(handle, REFRESH_S, console=console, title=query, total=total_rows, status_path=status_path,
                  transient=True):
        _wait_until_finished(handle)


def _wait_until_finished(handle: Any) -> None:
    # In slices, so that Ctrl-C reaches this thread promptly whatever the platform's Event.wait does.
    while not handle.finished.wait(WAIT_SLICE_S):
        pass


def summary_table(result: DemoResult) -> Table:
    """The demo's summary: one row per query."""
    origin = "generated now" if result.generated else "cached"
    table = Table(title=f"TPCx-BB on elastream vs Spark SQL ({result.data_dir}, {origin})")
    table.add_column("query")
    for col in ("answer rows", "stream rows", "seconds", "tuples/s", "p50 ms", "p99 ms", "Spark batch s"):
        table.add_column(col, justify="right")
    table.add_column("match")
    for r in result.rows:
        table.add_row(r.query, f"{r.rows:,}", f"{r.input_rows:,}", f"{r.seconds:.2f}", f"{r.tuples_per_second:,.0f}",
                      _ms(r.latency_p50_ms), _ms(r.latency_p99_ms), f"{r.batch_seconds:.2f}",
                      "[green]yes[/]" if r.match else "[red]no[/]")
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def run_barrier(args: argparse.Namespace, console: Console) -> int:
    """The Barrier flow over a generated CSV, with a live operator table."""
    path = write_sensor_csv(cache_dir() / "sensors.csv", args.rows)
    flow, sink = build_demo_flow(path)
    handle = es.Runner(threads=args.threads, policy=args.policy).start(flow)
    if args.json:
        result = handle.wait()
    else:
        console.print(f"[bold]elastream demo --barrier[/]: {args.rows:,} rows from {path}, "
                      f"{args.threads} threads, policy {args.policy}")
        result = _watch(handle, console, args.status)
    records = result.outputs[sink]
    aligned = sum(1 for r in records if r["aligned"])
    if args.json:
        print(json.dumps({"demo": "barrier-csv", "csv": str(path), "rows": args.rows, "records": len(records),
                          "aligned": aligned, "elapsed_s": result.elapsed_s, "sample": records[:3],
                          "stats": stats_dict(result.stats)}, indent=2))
    else:
        _print_report(console, records, aligned, result)
    return 0 if len(records) == args.rows == aligned else 1


def _watch(handle: es.RunHandle, console: Console, status_path: Path | None = None) -> es.RunResult:
    """Show the live view until the flow ends; return its result."""
    with LiveView(handle, REFRESH_S, console=console, title="barrier", status_path=status_path):
        _wait_until_finished(handle)
    console.print()
    return handle.wait()


def _print_report(console: Console, records: list[dict[str, Any]], aligned: int, result: es.RunResult) -> None:
    sample = Table(title=f"result: {len(records):,} records, {aligned:,} with both columns from the same row")
    cols = list(records[0]) if records else []
    for c in cols:
        sample.add_column(c, justify="right")
    for r in records[:5]:
        sample.add_row(*(str(r[c]) for c in cols))
    console.print(sample)
    console.print(operator_table(result.stats))
    console.print(worker_table(result.stats))
    rate = len(records) / result.elapsed_s if result.elapsed_s > 0 else 0.0
    console.print(f"{len(records):,} records in {result.elapsed_s:.2f} s ({rate:,.0f} records/s)")
