"""``elastream bench spark``: the five TPCx-BB queries on Spark Structured Streaming, locally and on a cluster.

What one run measures, on the same data (the demo's cached TPCx-BB data set
of ``--scale``, generated on Spark when absent, or ``--data``):

* ``local``: each query on elastream's local engine with ``es.Runner()``'s
  defaults; its answer is the reference every Spark answer must equal;
* ``spark-streaming`` on each target (``--targets``): ``local`` is
  ``local[2]`` (``--local-master``); ``cluster`` is a standalone master and two
  workers of one core each started on 127.0.0.1 for the run
  (:mod:`elastream.spark.local_cluster`) and stopped afterwards. Per query:
  end-to-end tuples/s (first data step fed → flushing batch done),
  steady-state tuples/s (Spark's streaming progress: input rows / durations of
  the micro-batches after the first), p50/p99 micro-batch latency (each step's
  marker round trip), and whether the answer equals the local engine's;
* ``native`` on each target: the hand-written ``applyInPandasWithState``
  keyed running sum (:mod:`elastream.bench._keyed_spark`) on as many tuples as
  the largest stream of the run, in micro-batches of the same size, checked
  against a plain loop; measured the same way;
* ratios: each query's steady-state tuples/s ÷ the native reference's on the
  same target, and the goal check: every query ≥ 25,000 tuples/s in steady
  state at ``local[2]`` on scale-0.5 data, within 2× of the native reference.

``--repeat N`` keeps each Spark row's best run (highest steady state).
``--quick``: scale 0.01, q04 and q15, local only, 20,000 rows per micro-batch. The table, the JSON and a
PNG (``bench/results/spark/`` unless ``--plot``) give the results; the machine's
load average is recorded next to them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from elastream.bench._common import machine

QUERIES = ("q01", "q02", "q03", "q04", "q15")
TARGETS = ("local", "cluster")
QUICK_SCALE = 0.01
QUICK_QUERIES = ("q04", "q15")
#: rows per micro-batch with --quick: a small stream still makes several batches, so a steady state exists
QUICK_ROWS_PER_BATCH = 20_000
GOAL_TUPLES_PER_SECOND = 25_000.0
GOAL_NATIVE_RATIO = 0.5
GOAL_SCALE = 0.5
DEFAULT_PLOT_DIR = Path(__file__).resolve().parent / "results" / "spark"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench spark``."""
    parser.add_argument("--scale", type=float, default=None,
                        help=f"TPCx-BB scale factor (default {GOAL_SCALE:g}, the goal's; {QUICK_SCALE:g} with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="an existing TPCx-BB data folder (default: the "
                        "demo's cache for --scale and --seed, generated when absent)")
    parser.add_argument("--queries", nargs="+", choices=QUERIES, default=None,
                        help=f"default all five ({', '.join(QUICK_QUERIES)} with --quick)")
    parser.add_argument("--targets", type=_targets, default=None, metavar="local,cluster",
                        help="where Spark runs: local (--local-master) and/or cluster (a two-worker loopback "
                             "standalone cluster, one core each); default both (local with --quick)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each Spark row; the best is kept (default 1)")
    parser.add_argument("--rows-per-batch", type=int, default=None, metavar="N",
                        help="stream rows per micro-batch, queries and native reference (default: the engine's)")
    parser.add_argument("--stream-rows", type=int, default=None, metavar="N",
                        help="cut each event stream to its first N rows (every table kept; default the whole "
                             "stream): enough micro-batches for a steady state in less time")
    parser.add_argument("--local-master", default="local[2]", help="the local target's master (default local[2])")
    parser.add_argument("--native-keys", type=int, default=1_000, help="keys of the native reference (default 1000)")
    parser.add_argument("--native-rounds", type=int, default=0,
                        help="per-tuple cost of the native reference in rounds of the keyed bench's burn (default 0)")
    parser.add_argument("--plot", type=Path, default=None,
                        help=f"the PNG to write (default {DEFAULT_PLOT_DIR}/spark-sf<SCALE>.png; '-' for none)")
    parser.add_argument("--quick", action="store_true",
                        help=f"scale {QUICK_SCALE:g}, {' and '.join(QUICK_QUERIES)}, local only, "
                             f"{QUICK_ROWS_PER_BATCH:,} rows per micro-batch (for tests)")


def _targets(text: str) -> list[str]:
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    wrong = [t for t in chosen if t not in TARGETS]
    if wrong or not chosen:
        raise argparse.ArgumentTypeError(f"targets are a comma-separated subset of {','.join(TARGETS)}, got {text!r}")
    return chosen


def settle(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick``."""
    if args.repeat < 1:
        raise SystemExit(f"elastream bench spark: --repeat must be at least 1, got {args.repeat}")
    if args.scale is None:
        args.scale = QUICK_SCALE if args.quick else GOAL_SCALE
    if args.queries is None:
        args.queries = list(QUICK_QUERIES if args.quick else QUERIES)
    if args.targets is None:
        args.targets = ["local"] if args.quick else list(TARGETS)
    if args.rows_per_batch is None and args.quick:
        args.rows_per_batch = QUICK_ROWS_PER_BATCH
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the local engine, then every Spark row on each target; return a JSON-ready dict."""
    from elastream.bench._spark_progress import BenchProgress
    from elastream.bench._spark_report import goal_check, save_plot, with_ratios

    args = settle(args)
    with BenchProgress(total=_steps(args)) as progress, _stream_cut(_data(args, progress), args) as data_dir:
        local, answers = _local_rows(args, data_dir, progress)
        targets = {t: _target_rows(t, args, data_dir, answers, progress) for t in args.targets}
    result = {"benchmark": "spark", "scale": args.scale, "seed": args.seed, "data": str(args.data_used),
              "stream_rows_cap": args.stream_rows, "queries": list(args.queries), "repeat": args.repeat,
              "rows_per_batch": _rows_per_batch(args), "local_engine": local, "targets": with_ratios(targets),
              "machine": machine()}
    result["goal"] = goal_check(result, GOAL_TUPLES_PER_SECOND, GOAL_NATIVE_RATIO, GOAL_SCALE)
    result["all_match"] = all(row["match"] for t in result["targets"].values()
                              for row in [*t["queries"].values(), t["native"]])
    result["plot"] = save_plot(result, _plot_path(args))
    return result


def _steps(args: argparse.Namespace) -> int:
    """Measurements the progress bar counts: the data, the local engine's queries, each target's rows."""
    return 1 + len(args.queries) + len(args.targets) * (1 + args.repeat * (1 + len(args.queries)))


@contextmanager
def _stream_cut(data_dir: Path, args: argparse.Namespace) -> Iterator[Path]:
    """``data_dir``, or a copy whose streams are cut to ``--stream-rows`` rows (removed afterwards)."""
    args.data_used = data_dir
    if args.stream_rows is None:
        yield data_dir
        return
    from elastream.bench._spark_data import stream_prefix

    with stream_prefix(data_dir, args.stream_rows) as cut:
        yield cut


def _plot_path(args: argparse.Namespace) -> Path | None:
    if args.plot is not None:
        return None if str(args.plot) == "-" else args.plot
    return DEFAULT_PLOT_DIR / f"spark-sf{args.scale:g}.png"


def _data(args: argparse.Namespace, progress: Any) -> Path:
    """The data folder: ``--data``, or the demo's cached data set (generated on the local target's session)."""
    if args.data is not None:
        progress.advance(f"data: {args.data}")
        return args.data
    from elastream.spark.session import get_session
    from elastream.workloads.tpcxbb_demo import DemoHooks, DemoOptions, ensure_data

    with progress.working(f"data: TPCx-BB scale {args.scale:g} (generated on Spark if not cached)"):
        data_dir, _, _ = ensure_data(DemoOptions(scale=args.scale, seed=args.seed, master=args.local_master),
                                     get_session(args.local_master), DemoHooks())
    return data_dir


def _local_rows(args: argparse.Namespace, data_dir: Path, progress: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each query on the local engine (Runner defaults): its numbers and its answer (the reference)."""
    from elastream.bench._spark_measure import local_run

    rows, answers = {}, {}
    for query in args.queries:
        with progress.working(f"{query} · local engine (es.Runner() defaults)"):
            rows[query], answers[query] = local_run(query, data_dir)
    return rows, answers


def _target_rows(target: str, args: argparse.Namespace, data_dir: Path, answers: dict[str, Any],
                 progress: Any) -> dict[str, Any]:
    """The native reference and every query on the spark-streaming engine, on one target."""
    from elastream.bench._spark_measure import NativeReference, best, spark_run
    from elastream.tpcxbb import io
    from elastream.tpcxbb.schema import QUERY_STREAM

    tuples = max(io.row_count(data_dir, QUERY_STREAM[q]) for q in args.queries)
    native = NativeReference(tuples, args.native_keys, args.native_rounds, _rows_per_batch(args))
    with target_session(target, args) as (spark, described):
        runs: dict[str, list[dict[str, Any]]] = {"native": [], **{q: [] for q in args.queries}}
        for _ in range(args.repeat):
            with progress.working(f"{target} · native applyInPandasWithState running sum ({tuples:,} tuples)"):
                runs["native"].append(native.run(spark))
            for query in args.queries:
                with progress.working(f"{target} · {query} on spark-streaming"):
                    runs[query].append(spark_run(spark, query, data_dir, answers[query], args.rows_per_batch))
    return {**described, "native": best(runs["native"]), "queries": {q: best(runs[q]) for q in args.queries}}


def _rows_per_batch(args: argparse.Namespace) -> int:
    from elastream.spark.stream_steps import DEFAULT_ROWS_PER_BATCH

    return args.rows_per_batch or DEFAULT_ROWS_PER_BATCH


@contextmanager
def target_session(target: str, args: argparse.Namespace) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A Spark session on ``target`` and its description; a cluster is started for the block and stopped after it."""
    from elastream.bench._keyed_spark import local_cores
    from elastream.spark.session import get_session, stop_session

    if target == "local":
        spark = get_session(args.local_master)
        yield spark, {"master": args.local_master, "cores": local_cores(args.local_master)}
        return
    from elastream.spark.local_cluster import running_cluster

    with tempfile.TemporaryDirectory(prefix="elastream-bench-cluster-") as folder:
        with running_cluster(Path(folder), workers=2, cores_per_worker=1, memory="2g") as cluster:
            try:
                spark = get_session(cluster.master_url, conf=cluster_conf(cluster.cores))
                yield spark, {"master": cluster.master_url, "workers": cluster.workers,
                              "cores_per_worker": cluster.cores_per_worker, "cores": cluster.cores}
            finally:
                stop_session()  # before the cluster goes: the driver would keep calling a dead master


def cluster_conf(cores: int) -> dict[str, str]:
    """The driver's settings on the loopback cluster: executors run this Python, one task slot per core."""
    return {"spark.pyspark.python": sys.executable, "spark.executor.memory": "1g", "spark.cores.max": str(cores),
            "spark.sql.shuffle.partitions": str(cores)}


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table and the goal check."""
    from elastream.bench._spark_report import print_tables

    print_tables(result, console)
