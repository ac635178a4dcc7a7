"""Running a flow on Spark from the driver: :func:`run_flow_on_spark` and the result it returns.

The driver reads the flow into a plan (:mod:`elastream.spark.plan`), starts one
streaming query over a watched folder (:mod:`elastream.spark.frames`), feeds
the source's files into it one step at a time and waits for each step's marker
at the sinks (:mod:`elastream.spark.feeding`), then feeds the end of stream and
waits for the batch that flushes every key. :mod:`elastream.spark.streaming`
explains the protocol.

Threading: call :func:`run_flow_on_spark` from one driver thread (the Spark
backend's handle runs it on a background thread); Spark calls the sink
callback on its own thread. ``stop`` may be set from any thread.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.spark.failures import SparkTranslationError, query_error
from elastream.spark.feeding import Collector, Feeder, RunStopped
from elastream.spark.frames import flow_frame, local_workers_like_driver, session_conf, source_frame
from elastream.spark.order_keys import END_KEY, marker_key
from elastream.spark.plan import FlowPlan, plan_flow

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from elastream.graph.flow import Flow


@dataclass(frozen=True, slots=True)
class SparkRunResult:
    """What :func:`run_flow_on_spark` returns.

    ``outputs`` maps each Collect sink's name to its items in order;
    ``seconds`` runs from the first data step fed to the end of the flushing
    batch (after a warm-up step that only carries a marker);
    ``rows_in`` counts the source rows; ``step_latencies_ms`` is each step's
    marker round trip (fed → seen at the sink), the last one being the end of
    stream; ``batches`` counts the micro-batches the sinks saw. ``stopped``:
    the run was stopped early (``stop``), so ``outputs`` hold what the sinks had
    and ``rows_in`` the rows of the steps that reached them.
    """

    outputs: dict[str, list[Any]]
    seconds: float
    rows_in: int
    batches: int
    step_latencies_ms: tuple[float, ...]
    stopped: bool = False

    @property
    def tuples_per_second(self) -> float:
        """Source rows per second."""
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_p50_ms(self) -> float | None:
        """Median step latency (data steps only), ms."""
        return _percentile(self.step_latencies_ms[:-1], 50)

    @property
    def latency_p99_ms(self) -> float | None:
        """99th-percentile step latency (nearest rank, data steps only), ms."""
        return _percentile(self.step_latencies_ms[:-1], 99)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(min(rank, len(ordered))) - 1]


#: Session settings a run needs (elastream.spark.streaming), restored once the query has started.
_QUERY_CONF = {
    "spark.sql.streaming.unsupportedOperationCheck": "false",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
}


def run_flow_on_spark(flow: Flow, *, spark: SparkSession | None = None, checkpoint_dir: str | Path | None = None,
                      source_files: Mapping[str, Sequence[Path]] | None = None, files_per_batch: int = 1,
                      shuffle_partitions: int | None = None, timeout_s: float | None = None,
                      stop: threading.Event | None = None) -> SparkRunResult:
    """Run ``flow`` on Spark Structured Streaming; the same sink outputs, in order, as a sequential local run.

    ``spark``: the session (default :func:`elastream.spark.session.get_session`).
    ``checkpoint_dir``: where the query keeps its checkpoint and the fed files
    (must be empty or absent; kept afterwards); default a temporary folder,
    removed afterwards. ``source_files``: the source's files in stream order
    by source name (default what its FromParquet reads). ``files_per_batch``:
    files per micro-batch. ``shuffle_partitions``: state partitions of the
    keyed steps (default the session's ``spark.sql.shuffle.partitions``).
    ``timeout_s``: give up (TimeoutError) when a step takes longer. ``stop``:
    set it (from any thread) to stop the run at the next step; the result is
    then marked ``stopped``.

    Raises :class:`SparkTranslationError` (before Spark starts) for an
    operator that is local-only, and :class:`~elastream.errors.OperatorError`
    naming the operator whose function failed in a Spark worker.

    Needs a classic session (not Spark Connect): the sink callback keeps the
    outputs in this process. On a cluster, ``checkpoint_dir`` and the stream
    files must be on storage every executor reads (fed files are symbolic
    links to them).

    Example::

        result = run_flow_on_spark(flow, files_per_batch=2)
        result.outputs["out"], result.tuples_per_second, result.latency_p99_ms
    """
    if files_per_batch < 1:
        raise ValueError(f"files_per_batch must be >= 1, got {files_per_batch}")
    plan = plan_flow(flow)
    files, columns = _source_of(plan, source_files)
    root, temporary = _checkpoint_root(checkpoint_dir)
    try:
        if spark is None:
            from elastream.spark.session import get_session

            spark = get_session()
        chunks = [list(enumerate(files))[i:i + files_per_batch] for i in range(0, len(files), files_per_batch)]
        return _run(spark, plan, chunks, columns, root, shuffle_partitions, timeout_s, stop)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def _source_of(plan: FlowPlan, source_files: Mapping[str, Sequence[Path]] | None
               ) -> tuple[list[Path], tuple[str, ...] | None]:
    """The source's files in stream order and its columns, from what its spec declared (or ``source_files``)."""
    name = plan.routes[plan.source].name
    given = (source_files or {}).get(name)
    files = [Path(f) for f in (given if given is not None else plan.source_options["files"]())]
    if not files:
        raise SparkTranslationError(f"source {name!r} has no files", operator=name)
    columns = plan.source_options.get("columns")
    return files, tuple(columns) if columns is not None else None


def _checkpoint_root(checkpoint_dir: str | Path | None) -> tuple[Path, bool]:
    if checkpoint_dir is None:
        return Path(tempfile.mkdtemp(prefix="elastream-spark-")), True
    root = Path(checkpoint_dir)
    if root.exists() and any(root.iterdir()):
        # A used checkpoint would resume an old query instead of running this one from the start.
        raise FileExistsError(f"checkpoint folder {root} is not empty; give a new or empty folder")
    root.mkdir(parents=True, exist_ok=True)
    return root, False


@dataclass(slots=True)
class _Progress:
    """How far the feeding got: each step's latency (ms), when the data steps started and the run ended."""

    latencies: list[float] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started


Chunks = Sequence[Sequence[tuple[int, Path]]]


def _run(spark: SparkSession, plan: FlowPlan, chunks: Chunks, columns: tuple[str, ...] | None, root: Path,
         shuffle_partitions: int | None, timeout_s: float | None, stop: threading.Event | None) -> SparkRunResult:
    import pyarrow.parquet as pq

    if type(spark).__module__.startswith("pyspark.sql.connect"):
        # The sink hands each micro-batch to a callback in this process, which Spark Connect cannot do.
        raise SparkTranslationError("running a flow on Spark Structured Streaming needs a classic Spark session "
                                    "(--master or the standard Spark configuration); Spark Connect "
                                    "(SPARK_REMOTE) serves the batch engine and datagen only")
    feeder = Feeder(root)
    schema = spark.read.parquet(str(chunks[0][0][1])).schema
    columns = columns or tuple(schema.names)
    schema = type(schema)([schema[c] for c in columns])
    collector = Collector(plan.sinks)
    query = _start(spark, plan, feeder, schema, columns, collector, root / "checkpoint", shuffle_partitions)
    progress, stopped = _Progress(), False
    try:
        _feed(query, feeder, collector, chunks, progress, timeout_s, stop)
        _check_nothing_late(query)
    except RunStopped:
        stopped = True
    finally:
        query.stop()
    # A stopped run counts the rows of the data steps whose marker reached the sinks.
    reached = chunks if not stopped else chunks[:len(progress.latencies)]
    rows = sum(pq.ParquetFile(path).metadata.num_rows for chunk in reached for _, path in chunk)
    return SparkRunResult(collector.outputs(), progress.seconds, rows, collector.batches,
                          tuple(progress.latencies), stopped)


def _feed(query: Any, feeder: Feeder, collector: Collector, chunks: Chunks, progress: _Progress,
          timeout_s: float | None, stop: threading.Event | None) -> None:
    """Feed a warm-up step, the data steps, then the end, noting each step's latency in ``progress``.

    The warm-up step (a marker only) takes the query's one-time costs (first
    planning, Python workers starting) off the clock, as the local engine's
    clock leaves out process start-up.
    """
    def step(number: int, files: Sequence[tuple[int, Path]], control: int, key: bytes) -> float:
        fed = feeder.place(number, files, control)
        return (collector.wait_for(key, query, timeout_s, stop) - fed) * 1e3

    step(0, [], 0, marker_key(0))
    progress.started = time.perf_counter()
    for n, chunk in enumerate(chunks, start=1):
        progress.latencies.append(step(n, chunk, n, marker_key(n)))
    progress.latencies.append(step(len(chunks) + 1, [], -1, END_KEY))
    try:
        query.processAllAvailable()  # the batch after the end row: timeouts flush every key
    except Exception as exc:  # noqa: BLE001 - an on_end hook failed in a worker: name its operator
        raise query_error(exc) from exc
    progress.ended = time.perf_counter()


def _start(spark: SparkSession, plan: FlowPlan, feeder: Feeder, schema: Any, columns: tuple[str, ...],
           collector: Collector, checkpoint: Path, shuffle_partitions: int | None) -> Any:
    conf = dict(_QUERY_CONF)
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    with session_conf(spark, conf), local_workers_like_driver(spark):
        source = source_frame(spark, feeder.watched, schema, columns)
        frame = flow_frame(plan, source, columns)
        return (frame.writeStream.foreachBatch(collector).outputMode("append")
                .option("checkpointLocation", str(checkpoint)).start())


def _check_nothing_late(query: Any) -> None:
    """Fail loudly if a keyed step dropped rows as late: the synthetic event times must make that impossible."""
    for progress in query.recentProgress:
        for op in progress.stateOperators:
            if op.numRowsDroppedByWatermark:
                raise RuntimeError(f"Spark dropped {op.numRowsDroppedByWatermark} rows as late in batch "
                                   f"{progress.batchId} ({op.operatorName}): the translation is wrong")
