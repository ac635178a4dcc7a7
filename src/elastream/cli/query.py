"""``elastream query qNN --data DIR --engine ENGINE``: answer one TPCx-BB query (spec §4).

One sub-command per query (``q01``, ``q02``, ``q03``, ``q04``, ``q15``), each
with a flag for every field of its parameter class
(:mod:`elastream.tpcxbb.params`, spec §3 defaults), e.g. ``--stores 10 20``,
``--window-s 3600``. ``--engine`` chooses from the registry of
:mod:`elastream.tpcxbb.engines`; each engine adds its own flags (``--master``
for Spark). Prints the answer as a rich table, or with ``--json`` one object
``{"query", "engine", "rows", "seconds", "tuples_per_second", "latency_ms":
{"p50", "p99"}}``; ``--out FILE`` also writes the answer as Parquet. Exit
codes: 0 answered, 2 bad input or a failed run, 3 a run stopped on purpose
before the end of its stream (``--max-batches``: the same command carries it
on). Runs in the caller's thread.

Example::

    elastream query q02 --data /tmp/tpcxbb --engine spark-batch --item-sk 10001 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from elastream.errors import ElastreamError
from elastream.spark.failures import RunIncomplete
from elastream.tpcxbb.engines import QueryRun, add_engine_arguments, available_engines, engine_entry, get_engine
from elastream.tpcxbb.params import QUERIES, params_dict, params_from_options

DEFAULT_ENGINE = "spark-batch"
#: The exit code of a run stopped on purpose before the end of its stream (not an error: it can be carried on).
EXIT_INCOMPLETE = 3
PRINTED_ROWS = 100
_TITLES = {"q01": "items sold together", "q02": "products viewed together with a product",
           "q03": "last items viewed before a purchase", "q04": "shopping-cart abandonment",
           "q15": "categories with flat or declining store sales"}


def add_parser(sub: Any) -> None:
    """Register ``query`` (with one sub-command per query) on the top-level sub-parsers."""
    p = sub.add_parser("query", help="answer a TPCx-BB query (q01, q02, q03, q04, q15)",
                       description="Answer one TPCx-BB query on a data set written by `elastream datagen tpcxbb`.")
    queries = p.add_subparsers(dest="query", required=True, metavar="QUERY")
    for name, cls in QUERIES.items():
        q = queries.add_parser(name, help=_TITLES[name], description=f"TPCx-BB {name}: {_TITLES[name]} (spec §4).")
        _add_common(q)
        params = q.add_argument_group("query parameters (spec §3 defaults)")
        for f in dataclasses.fields(cls):
            _add_param(params, f)
        add_engine_arguments(q.add_argument_group("engine options"))
        q.set_defaults(handler=run_command)


def _add_common(q: argparse.ArgumentParser) -> None:
    engines = available_engines()
    q.add_argument("--data", required=True, metavar="DIR", help="data set folder (elastream datagen tpcxbb --out)")
    q.add_argument("--engine", default=DEFAULT_ENGINE, metavar="ENGINE",
                   help=f"one of: {', '.join(engines)} (default {DEFAULT_ENGINE}); "
                        + "; ".join(f"{e}: {engine_entry(e).help}" for e in engines))
    q.add_argument("--out", metavar="FILE", help="also write the answer as Parquet to FILE")
    q.add_argument("--json", action="store_true",
                   help='print {"query", "engine", "rows", "seconds", "tuples_per_second", "latency_ms": '
                        '{"p50", "p99"}}; the latencies are null for spark-batch (a batch job has no per-tuple '
                        'latency); local: marker latencies (ordered-multicore §7)')


def _add_param(group: Any, f: dataclasses.Field[Any]) -> None:
    flag = "--" + f.name.replace("_", "-")
    kit = f.metadata.get("kit")
    default = f.default
    shown = " ".join(map(str, default)) if isinstance(default, tuple) else ("whole stream" if default is None
                                                                            else default)
    text = f"{f.metadata.get('help', '')} (default {shown}{'; kit: ' + kit if kit else ''})"
    if isinstance(default, tuple):
        group.add_argument(flag, type=int, nargs="+", default=None, metavar="N", help=text)
    elif isinstance(default, str):
        group.add_argument(flag, default=None, help=text)
    else:  # int, or int | None (Q1's window)
        group.add_argument(flag, type=int, default=None, metavar="N", help=text)


def run_command(args: argparse.Namespace) -> int:
    """Run the query on the chosen engine and report it; 2 on bad input or a failed run, 3 when it stopped early."""
    try:
        entry = engine_entry(args.engine)
        params = params_from_options(args.query, vars(args))
        data = Path(args.data)
        if not data.is_dir():
            raise FileNotFoundError(f"--data {data}: no such folder")
    except (KeyError, ValueError, FileNotFoundError) as exc:
        print(f"elastream query: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    try:
        run = get_engine(entry.name)(args.query, data, params, vars(args))
    except RunIncomplete as exc:
        print(f"elastream query: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except (ElastreamError, OSError) as exc:
        print(f"elastream query: error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(run.answer, args.out)
    if args.json:
        print(json.dumps(run.summary(), indent=2))
    else:
        console = Console()
        # Seconds and throughput go on their own line: a one-column answer would wrap a long title.
        console.print(answer_table(run.answer, f"{args.query} on {run.engine}: {run.answer.num_rows} rows"))
        console.print(performance_line(run))
        console.print(f"[dim]parameters: {json.dumps(params_dict(params))}[/]")
    return 0


def performance_line(run: QueryRun) -> str:
    """Throughput and (for streaming engines) marker latency of a run, as one line of rich markup.

    Example: ``performance_line(run)`` →
    ``"68,133 input rows in 0.21 s: 324,443 tuples/s; latency p50 1.20 ms, p99 9.80 ms"``
    """
    text = f"{run.input_rows:,} input rows in {run.seconds:.2f} s: [bold]{run.tuples_per_second:,.0f} tuples/s[/]"
    if run.latency_p50_ms is None:
        return text + " [dim](batch: no per-tuple latency)[/]"
    return text + f"; latency p50 [bold]{run.latency_p50_ms:.2f} ms[/], p99 [bold]{run.latency_p99_ms:.2f} ms[/]"


def answer_table(answer: pa.Table, title: str, limit: int = PRINTED_ROWS) -> Table:
    """A rich table of an answer's first ``limit`` rows (floats with 7 decimals, as K's decimal(15,7))."""
    table = Table(title=title)
    for name in answer.column_names:
        table.add_column(name, justify="right")
    for row in answer.slice(0, limit).to_pylist():
        table.add_row(*(_cell(v) for v in row.values()))
    if answer.num_rows > limit:
        table.caption = f"… {answer.num_rows - limit} more rows"
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.7f}"
    return str(value)
