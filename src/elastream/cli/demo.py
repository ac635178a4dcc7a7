"""``elastream demo``: the main job — TPCx-BB on Spark and on elastream, answers checked against each other.

Default: :mod:`elastream.workloads.tpcxbb_demo` generates (once, cached) a
small TPCx-BB data set with the Spark job, computes the five reference answers
with Spark SQL, runs the five streaming pipelines on the local engine with a
live progress bar each (rows read, tuples/s, queued tuples), checks every
answer and prints a summary table (rows, seconds, tuples/s, p50/p99 latency,
match). Exit status 0 only when every answer matches.

``--barrier`` runs the small Barrier flow over a generated CSV instead (no
Spark): a rich Live table of operator states, tuples and queues from
``handle.stats()`` while it runs, then a sample of the result, the
per-operator statistics and worker utilisation.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import elastream as es
from elastream.cli.tables import live_table, operator_table, stats_dict, worker_table
from elastream.workloads.demo import build_demo_flow, cache_dir, write_sensor_csv
from elastream.workloads.tpcxbb_demo import QUERIES, DemoHooks, DemoOptions, DemoResult, DemoRow, run_demo

REFRESH_S = 0.25


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
        result = run_demo(options, _live_hooks(console))
        console.print(summary_table(result))
        verdict = "[green]every answer matches Spark's[/]" if result.all_match else "[red]answers differ[/]"
        console.print(verdict)
        for row in result.rows:
            if not row.match:
                console.print(f"[red]{row.query}[/]: {row.difference}")
    return 0 if result.all_match else 1


def _live_hooks(console: Console) -> DemoHooks:
    """Displays for the demo's steps: Spark stage bars, one progress bar per local run, a line per result."""
    from elastream.spark.progress import StageProgress

    def datagen(spark: Any) -> Any:
        return StageProgress(spark, console)

    def phase(text: str) -> None:
        console.print(f"[bold cyan]→[/] {text}")

    def local_started(query: str, total_rows: int, handle: Any) -> None:
        _follow(console, query, total_rows, handle)

    def local_finished(row: DemoRow) -> None:
        mark = "[green]match[/]" if row.match else "[red]DIFFERS[/]"
        console.print(f"  {row.query}: {row.rows} rows in {row.seconds:.2f} s "
                      f"({row.tuples_per_second:,.0f} tuples/s), {mark}")

    return DemoHooks(datagen=datagen, phase=phase, local_started=local_started, local_finished=local_finished)


def _follow(console: Console, query: str, total_rows: int, handle: Any) -> None:
    """A progress bar of the rows the stream source has read, until the run ends (the caller's thread)."""
    columns = (TextColumn(f"  {query}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TextColumn("{task.fields[queued]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task(query, total=total_rows, rate="", queued="")
        while not handle.done:
            _update(progress, bar, handle.stats())
            time.sleep(REFRESH_S)  # display cadence, not synchronisation


def _update(progress: Progress, bar: Any, stats: Any) -> None:
    ops = list(stats.operators.values())
    sources = [op for op in ops if not op.inputs]
    read = sum(op.tuples_out for op in sources)
    queued = sum(p.size for op in ops for p in op.inputs)
    rate = read / stats.elapsed_s if stats.elapsed_s > 0 else 0.0
    progress.update(bar, completed=read, rate=f"{rate:,.0f} rows/s", queued=f"{queued:,} queued")


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
        result = _watch(handle, console)
    records = result.outputs[sink]
    aligned = sum(1 for r in records if r["aligned"])
    if args.json:
        print(json.dumps({"demo": "barrier-csv", "csv": str(path), "rows": args.rows, "records": len(records),
                          "aligned": aligned, "elapsed_s": result.elapsed_s, "sample": records[:3],
                          "stats": stats_dict(result.stats)}, indent=2))
    else:
        _print_report(console, records, aligned, result)
    return 0 if len(records) == args.rows == aligned else 1


def _watch(handle: es.RunHandle, console: Console) -> es.RunResult:
    """Refresh a live operator table until the flow ends; return its result."""
    with Live(live_table(handle.stats()), console=console, refresh_per_second=8) as live:
        while not handle.done:
            time.sleep(REFRESH_S)  # display cadence, not synchronisation
            live.update(live_table(handle.stats()))
        result = handle.wait()
        live.update(live_table(result.stats, title=f"finished in {result.elapsed_s:.2f} s"))
    console.print()
    return result


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
