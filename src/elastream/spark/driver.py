"""Running a flow on Spark from the driver: :func:`run_flow_on_spark` and the result it returns.

The driver reads the flow into a plan (:mod:`elastream.spark.plan`), cuts the
source's stream into steps of files or rows (:mod:`elastream.spark.stream_steps`),
starts one streaming query over a watched folder (:mod:`elastream.spark.frames`),
feeds the steps into it one at a time and waits for each step's marker at the
sinks (:mod:`elastream.spark.feeding`); the last step also carries the end of
stream, so the batch that reads it flushes every key. A run on a kept folder that a failed or
stopped run of the same flow left resumes it (:mod:`elastream.spark.run_folder`).
:mod:`elastream.spark.streaming` explains the protocol.

Threading: call :func:`run_flow_on_spark` from one driver thread (the Spark
backend's handle runs it on a background thread); Spark calls the sink
callback on its own thread. ``stop`` may be set from any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.spark.failures import SparkTranslationError
from elastream.spark.feeding import Collector, Feeder, RunStopped
from elastream.spark.frames import flow_frame, local_workers_like_driver, session_conf, source_frame
from elastream.spark.order_keys import END_KEY, marker_key
from elastream.spark.plan import FlowPlan, plan_flow
from elastream.spark.run_folder import RunFolder
from elastream.spark.stream_steps import StreamSteps

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from elastream.graph.flow import Flow


@dataclass(frozen=True, slots=True)
class SparkRunResult:
    """What :func:`run_flow_on_spark` returns.

    ``outputs`` maps each Collect sink's name to its items in order;
    ``seconds`` runs from the first data step fed to the end of the flushing
    batch (after a warm-up step that only carries a marker);
    ``rows_in`` counts the source rows; ``step_latencies_ms`` is each data
    step's marker round trip (fed → seen at the sink), then the end of
    stream's (the last data step carries the end, so its round trip, flushing
    included, counts for both); ``batches`` counts the micro-batches the sinks
    saw. ``stopped``:
    the run was stopped early (``stop``), so ``outputs`` hold what the sinks had
    and ``rows_in`` the rows of the steps that reached them. ``resumed_steps``:
    the steps (warm-up and end included) that an earlier run on the same
    folder had fed; this run resumed after them, and its latencies are those
    of the steps it fed itself.
    """

    outputs: dict[str, list[Any]]
    seconds: float
    rows_in: int
    batches: int
    step_latencies_ms: tuple[float, ...]
    stopped: bool = False
    resumed_steps: int = 0

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


#: Session settings a run needs (elastream.spark.streaming), restored once the query has started. Nothing
#: waits on time (no timeouts, no watermarks), so a batch without data would only cost its fixed price.
_QUERY_CONF = {
    "spark.sql.streaming.unsupportedOperationCheck": "false",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}
#: The version of the protocol between the driver and the layers (elastream.spark.streaming): a run folder of
#: another version holds a checkpoint this one cannot resume.
PROTOCOL = 2


def run_flow_on_spark(flow: Flow, *, spark: SparkSession | None = None, checkpoint_dir: str | Path | None = None,
                      source_files: Mapping[str, Sequence[Path]] | None = None, files_per_batch: int | None = None,
                      rows_per_batch: int | None = None, shuffle_partitions: int | None = None,
                      timeout_s: float | None = None, stop: threading.Event | None = None,
                      max_batches: int | None = None, identity: Mapping[str, Any] | None = None) -> SparkRunResult:
    """Run ``flow`` on Spark Structured Streaming; the same sink outputs, in order, as a sequential local run.

    ``spark``: the session (default :func:`elastream.spark.session.get_session`).
    ``checkpoint_dir``: where the query keeps its checkpoint, the fed steps and
    the sinks' batches (kept afterwards): a new or empty folder starts a run, the
    folder of an interrupted run of the same flow (a failure, a stop) resumes
    it; default a temporary folder, removed afterwards. ``source_files``: the
    source's files in stream order by source name (default what its FromParquet
    reads). Micro-batch size: ``files_per_batch`` files, or ``rows_per_batch``
    rows (default :data:`~elastream.spark.stream_steps.DEFAULT_ROWS_PER_BATCH`
    when neither is given; rows are written as slices Spark reads in parallel).
    ``shuffle_partitions``: state partitions of the keyed steps (default the
    session's ``spark.sql.shuffle.partitions``, at most its default parallelism:
    every state partition commits its state store in every micro-batch, so more
    partitions than cores only add that fixed cost). ``timeout_s``: give up
    (TimeoutError) when a step takes longer. ``stop``: set it (from any thread)
    to stop the run at the next step; the result is then marked ``stopped``.
    ``max_batches``: feed at most this many data steps (micro-batches), then
    stop likewise (a later run on the same folder carries on). ``identity``:
    what else the answer depends on (e.g. a query's parameters), as JSON
    values; a resumed run must give the same.

    Raises :class:`SparkTranslationError` (before Spark starts) for an
    operator that is local-only, :class:`~elastream.errors.OperatorError`
    naming the operator whose function failed in a Spark worker, ValueError
    for a checkpoint folder of another run and FileExistsError for a used
    folder that holds no run.

    Needs a classic session (not Spark Connect): the sink callback keeps the
    outputs in this process. On a cluster, ``checkpoint_dir`` and the stream
    files must be on storage every executor reads (fed files are symbolic
    links to them, or slices written there).

    Example::

        result = run_flow_on_spark(flow, rows_per_batch=50_000)
        result.outputs["out"], result.tuples_per_second, result.latency_p99_ms
    """
    plan = plan_flow(flow)
    files, columns = _source_of(plan, source_files)
    steps = StreamSteps.plan(files, columns, files_per_batch=files_per_batch, rows_per_batch=rows_per_batch)
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be >= 1, got {max_batches}")
    manifest = {**_manifest(flow, plan, steps), "identity": dict(identity or {})}
    folder = RunFolder.open(checkpoint_dir, manifest)  # refuses a used folder before Spark
    try:
        spark = _checked_session(spark)
        cores = _default_parallelism(spark)
        steps.use_slices(cores)
        if shuffle_partitions is None:
            shuffle_partitions = _state_partitions(spark, cores)
        return _run(spark, plan, steps, folder, shuffle_partitions, _Limits(timeout_s, stop, max_batches))
    finally:
        folder.remove_if_temporary()


def _checked_session(spark: SparkSession | None) -> SparkSession:
    """``spark`` (default the shared session), its executors checked: the package shipped, their Python and packages."""
    if spark is None:
        from elastream.spark.session import get_session

        spark = get_session()
    from elastream.spark.executors import check_executors

    check_executors(spark)
    return spark


def _default_parallelism(spark: SparkSession) -> int:
    """How many tasks read a step's rows at once: the session's default parallelism."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - a session without a SparkContext (Spark Connect): _run refuses it
        return 1


def _state_partitions(spark: SparkSession, cores: int) -> int | None:
    """The session's shuffle partitions, at most ``cores`` (None: leave the session's setting)."""
    try:
        configured = int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
    except Exception:  # noqa: BLE001 - an unreadable setting: leave it to Spark
        return None
    return max(1, min(configured, cores))


def _manifest(flow: Flow, plan: FlowPlan, steps: StreamSteps) -> dict[str, Any]:
    """What a resumed run must match: the flow's name and operators, and the stream's steps."""
    return {"protocol": PROTOCOL, "flow": flow.name, "operators": [[r.name, r.what] for r in plan.routes],
            **steps.describe()}


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


@dataclass(slots=True)
class _Progress:
    """How far the feeding got: latencies (ms) of the steps this run fed, data steps seen, start and end."""

    latencies: list[float] = field(default_factory=list)
    reached: int = 0
    resumed: int = 0
    started: float | None = None
    ended: float | None = None

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started


@dataclass(frozen=True, slots=True)
class _Limits:
    """When the driver gives up (``timeout_s`` per step) or stops (``stop`` set, ``max_batches`` data steps fed)."""

    timeout_s: float | None = None
    stop: threading.Event | None = None
    max_batches: int | None = None


def _run(spark: SparkSession, plan: FlowPlan, steps: StreamSteps, folder: RunFolder,
         shuffle_partitions: int | None, limits: _Limits) -> SparkRunResult:
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        # The sink hands each micro-batch to a callback in this process, which Spark Connect cannot do.
        raise SparkTranslationError("running a flow on Spark Structured Streaming needs a classic Spark session "
                                    "(--master or the standard Spark configuration); Spark Connect "
                                    "(SPARK_REMOTE) serves the batch engine and datagen only")
    feeder = Feeder(folder.root, resume=folder.resumed)
    schema = spark.read.parquet(str(steps.files[0])).schema
    columns = steps.columns or tuple(schema.names)
    schema = type(schema)([schema[c] for c in columns])
    collector = Collector(plan.sinks, folder.sink_batches)
    query = _start(spark, plan, feeder, schema, columns, collector, folder.checkpoint, shuffle_partitions)
    progress, stopped = _Progress(), False
    try:
        _feed(query, feeder, collector, steps, progress, limits)
    except RunStopped:
        stopped = True
    finally:
        query.stop()
    return SparkRunResult(collector.outputs(), progress.seconds, steps.rows_before(progress.reached),
                          collector.batches, tuple(progress.latencies), stopped, progress.resumed)


def _feed(query: Any, feeder: Feeder, collector: Collector, steps: StreamSteps, progress: _Progress,
          limits: _Limits) -> None:
    """Feed a warm-up step, then the data steps (the last one with the end), noting latencies in ``progress``.

    The warm-up step (a marker only) takes the query's one-time costs (first
    planning, Python workers starting) off the clock, as the local engine's
    clock leaves out process start-up. Steps an earlier run on this folder
    published are not fed again: their markers come from Spark replaying them
    (or from the sink batches kept). Raises :class:`RunStopped` when asked to
    stop, or before a data step beyond ``limits.max_batches``.
    """
    timeout_s, stop = limits.timeout_s, limits.stop

    def step(number: int, put: Any, controls: tuple[int, ...], key: bytes) -> None:
        if number in feeder.published:
            progress.resumed += 1
            collector.wait_for(key, query, timeout_s, stop)
            return
        if number and limits.max_batches is not None and len(progress.latencies) >= limits.max_batches:
            raise RunStopped()
        fed = feeder.place(number, put, controls)
        latency = (collector.wait_for(key, query, timeout_s, stop) - fed) * 1e3
        if number:  # the warm-up's is not a step of the stream
            progress.latencies.append(latency)

    step(0, None, (0,), marker_key(0))
    progress.started = time.perf_counter()
    last = len(steps)
    for n in range(1, last):
        step(n, partial(steps.put, n - 1), (n,), marker_key(n))
        progress.reached = n
    # The end rides with the last step: the batch reading it steps its rows, then every key group flushes.
    fed_before = len(progress.latencies)
    step(last, partial(steps.put, last - 1), (last, -1), END_KEY)
    progress.reached = last
    if len(progress.latencies) > fed_before:  # this run fed the last step: the end's round trip is the same
        progress.latencies.append(progress.latencies[-1])
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
