"""The ``spark-streaming`` engine: the §5 pipelines of :mod:`elastream.tpcxbb.pipelines` on Spark Structured Streaming.

``run_query(query, data_dir, params, options)`` builds the same flow the
``local`` engine runs (:func:`~elastream.tpcxbb.pipelines.build_flow`, without
latency markers: the translator measures latency itself) and hands it to
:func:`elastream.spark.streaming.run_flow_on_spark`, which translates it from
its declared operators. The answer comes from the flow's own ``finish``, so
both engines share every query function.

* ``seconds``: from the first stream file fed to the end of the flushing
  batch (session start-up not counted, as for ``spark-batch``);
* throughput = stream rows / ``seconds``;
* latency: per micro-batch, the round trip of the marker fed with its files
  (file placed → marker seen by the sink), p50 and p99 in ms.

``options`` (the CLI namespace as a dict): ``master``, ``checkpoint`` (a
folder; each run uses a new subfolder of it, kept; with ``resume`` the folder
itself, so running again after a failure, a stop or ``max_batches`` carries
the run on), ``max_batches`` (stop after that many micro-batches, raising
:class:`~elastream.spark.failures.RunIncomplete`), ``max_files_per_trigger``
(stream files per micro-batch) or ``rows_per_batch`` (stream rows per
micro-batch; default :data:`elastream.spark.stream_steps.DEFAULT_ROWS_PER_BATCH`
when neither is given) and ``shuffle_partitions`` (state partitions of the
keyed steps, default the session's setting capped at its default parallelism).

Runs on the caller's thread; Spark does the work.

Example::

    run = run_query("q04", Path("/tmp/tpcxbb"), Q04Params(), {"max_files_per_trigger": 2})
    run.answer, run.tuples_per_second, run.latency_p99_ms
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elastream.tpcxbb.engines import QueryRun, add_argument_once

ENGINE = "spark-streaming"


def add_arguments(parser: Any) -> None:
    """CLI flags of the spark-streaming engine (the registry's hook)."""
    add_argument_once(parser, "--master", default=None, metavar="URL",
                      help="Spark master URL (default: standard Spark configuration, else local[*]; "
                           "SPARK_REMOTE selects Spark Connect)")
    add_argument_once(parser, "--checkpoint", default=None, metavar="DIR",
                      help="spark-streaming: keep each run's checkpoint in a new subfolder of DIR (with --resume: "
                           "in DIR itself; default: a temporary folder, removed after the run)")
    add_argument_once(parser, "--resume", action="store_true",
                      help="spark-streaming: run in --checkpoint DIR itself rather than in a new subfolder: a new or "
                           "empty DIR starts the run; running the same command again after a failure, Ctrl-C or "
                           "--max-batches resumes where it stopped and gives the same answer (DIR of another "
                           "query, parameters, data or batch size is refused)")
    add_argument_once(parser, "--max-batches", type=int, default=None, metavar="N",
                      help="spark-streaming: stop after N micro-batches of the stream (with --checkpoint DIR "
                           "--resume; run the command again to carry on)")
    add_argument_once(parser, "--max-files-per-trigger", type=int, default=None, metavar="N",
                      help="spark-streaming: stream files per micro-batch (default: --rows-per-batch)")
    add_argument_once(parser, "--rows-per-batch", type=int, default=None, metavar="N",
                      help="spark-streaming: stream rows per micro-batch (default 200000; not with "
                           "--max-files-per-trigger)")
    add_argument_once(parser, "--shuffle-partitions", type=int, default=None, metavar="N",
                      help="spark-streaming: state partitions of the keyed steps "
                           "(default: the session's spark.sql.shuffle.partitions, at most its default parallelism)")


def run_query(query: str, data_dir: Path, params: Any, options: Mapping[str, Any]) -> QueryRun:
    """The ``spark-streaming`` engine of :mod:`elastream.tpcxbb.engines`: ``query``'s §5 pipeline on Spark."""
    from elastream.spark.session import get_session
    from elastream.spark.streaming import run_flow_on_spark
    from elastream.tpcxbb.pipelines import build_flow

    folder = _run_folder(options.get("checkpoint"), query, bool(options.get("resume")), options.get("max_batches"))
    qf = build_flow(query, Path(data_dir), params)
    spark = get_session(options.get("master"))
    result = run_flow_on_spark(qf.flow, spark=spark, checkpoint_dir=folder,
                               source_files={qf.source_name: qf.stream_files},
                               files_per_batch=options.get("max_files_per_trigger"),
                               rows_per_batch=options.get("rows_per_batch"),
                               shuffle_partitions=options.get("shuffle_partitions"),
                               max_batches=options.get("max_batches"), identity=_identity(query, data_dir, params))
    if result.stopped:
        from elastream.spark.failures import RunIncomplete

        raise RunIncomplete(f"stopped after {len(result.step_latencies_ms)} micro-batches (--max-batches) with "
                            f"{result.rows_in:,} stream rows read so far; {folder} keeps the run: run the same command "
                            "again to carry on")
    return QueryRun(query=query, engine=ENGINE, answer=qf.finish(result.outputs[qf.sink_name]),
                    seconds=result.seconds, input_rows=result.rows_in,
                    latency_p50_ms=result.latency_p50_ms, latency_p99_ms=result.latency_p99_ms)


def _run_folder(checkpoint: str | Path | None, query: str, resume: bool, max_batches: int | None) -> Path | None:
    """The run's folder: ``checkpoint`` itself (``resume``), else a new subfolder of it (or None: temporary)."""
    from elastream.spark.failures import SparkRunOptionError

    if resume and checkpoint is None:
        raise SparkRunOptionError("--resume needs --checkpoint DIR (the folder the run is kept in)")
    if max_batches is not None and not resume:
        raise SparkRunOptionError("--max-batches needs --checkpoint DIR --resume (to carry the run on later)")
    if checkpoint is None:
        return None
    if resume:
        return Path(checkpoint)
    return Path(checkpoint) / f"{query}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**9:09d}"


def _identity(query: str, data_dir: Path, params: Any) -> dict[str, Any]:
    """What the answer depends on beyond the flow's operators: a resumed run must match it."""
    from elastream.tpcxbb.params import params_dict

    return {"query": query, "data": str(Path(data_dir).resolve()), "params": params_dict(params)}
