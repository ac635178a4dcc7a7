"""``elastream demo``: run the Barrier flow over a generated CSV and show the engine at work.

Writes the CSV into the cache folder, starts the flow with ``runner.start``,
refreshes a rich Live table of operator states, tuples and queues from
``handle.stats()`` while it runs (from this, the caller's, thread), then prints
a sample of the result, the per-operator statistics and worker utilisation.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

import elastream as es
from elastream.cli.tables import live_table, operator_table, stats_dict, worker_table
from elastream.workloads.demo import build_demo_flow, cache_dir, write_sensor_csv

REFRESH_S = 0.25


def add_parser(sub: Any) -> None:
    """Register ``demo`` on the top-level sub-parsers."""
    p = sub.add_parser("demo", help="run the Barrier demo flow over a generated CSV")
    p.add_argument("--rows", type=int, default=200_000, help="CSV rows (default 200,000)")
    p.add_argument("--threads", type=int, default=2, help="worker threads (default 2)")
    p.add_argument("--policy", default="least_recently_run", help="scheduling policy")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and statistics)")
    p.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Write the CSV, run the flow with a live view, print the result and statistics."""
    from elastream.bench._common import make_console

    console = make_console()
    path = write_sensor_csv(cache_dir() / "sensors.csv", args.rows)
    flow, sink = build_demo_flow(path)
    handle = es.Runner(threads=args.threads, policy=args.policy).start(flow)
    if args.json:
        result = handle.wait()
    else:
        console.print(f"[bold]elastream demo[/]: {args.rows:,} rows from {path}, "
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
