"""``elastream datagen tpcxbb --scale SF --out DIR``: generate the TPCx-BB tables and streams on Spark.

Runs :func:`elastream.spark.datagen.generate` on a session built from
``--master`` / ``SPARK_REMOTE`` / standard Spark configuration (default
``local[*]``), with a rich display of the Spark stages on stderr, then prints
one line per table and stream (rows, seconds); ``--json`` prints one JSON
object instead. Runs in the caller's thread (the stage display has its own).

Example::

    elastream datagen tpcxbb --scale 0.01 --out /tmp/tpcxbb --seed 7
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table


def add_parser(sub: Any) -> None:
    """Register ``datagen`` on the top-level sub-parsers."""
    p = sub.add_parser("datagen", help="generate benchmark data on Spark",
                       description="Generate a benchmark data set with a PySpark job.")
    kinds = p.add_subparsers(dest="benchmark", required=True)
    t = kinds.add_parser("tpcxbb", help="TPCx-BB tables and sorted event streams (spec §2, §5, §7)",
                         description="Write the Parquet tables store_sales, web_clickstreams, item, web_page, "
                                     "date_dim, time_dim, customer, store and the streams ss_stream, wcs_stream "
                                     "(sorted by event time) into DIR. Deterministic for a seed and scale.")
    t.add_argument("--scale", type=float, required=True, metavar="SF",
                   help="scale factor (1 = about 675k store lines and 6.8M clicks; fractions such as 0.01 work)")
    t.add_argument("--out", required=True, metavar="DIR", help="output folder (tables in it are replaced)")
    t.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    t.add_argument("--master", default=None, metavar="URL",
                   help="Spark master URL (default: standard Spark configuration, else local[*]; "
                        "SPARK_REMOTE selects Spark Connect)")
    t.add_argument("--no-progress", action="store_true", help="do not draw the Spark stage display")
    t.add_argument("--json", action="store_true", help="print one JSON object (rows and seconds per output)")
    t.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Generate the data set; 2 on bad arguments."""
    from elastream.spark.datagen import TpcxbbSizes, generate
    from elastream.spark.progress import StageProgress
    from elastream.spark.session import get_session

    try:
        TpcxbbSizes.for_scale(args.scale)
    except ValueError as exc:
        print(f"elastream datagen: error: {exc}", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    started = time.perf_counter()
    spark = get_session(args.master)
    session_s = time.perf_counter() - started
    show = not args.no_progress and not args.json
    with StageProgress(spark, err, enabled=show) as progress:
        result = generate(args.out, args.scale, args.seed, spark=spark, progress=progress)
    if args.json:
        print(json.dumps({"benchmark": "tpcxbb", "scale": result.scale, "seed": result.seed, "out": str(result.out),
                          "rows": result.rows, "seconds": result.seconds, "session_seconds": session_s,
                          "step_seconds": result.step_seconds}, indent=2))
        return 0
    table = Table(title=f"TPCx-BB SF {result.scale:g}, seed {result.seed} → {result.out} "
                        f"({result.seconds:.1f} s, Spark session {session_s:.1f} s)")
    table.add_column("table / stream")
    table.add_column("rows", justify="right")
    table.add_column("seconds", justify="right")
    for name, rows in result.rows.items():
        table.add_row(name, f"{rows:,}", f"{result.step_seconds.get(name, 0.0):.2f}")
    Console().print(table)
    return 0
