"""A rich progress display of Spark stages, fed by ``SparkContext.statusTracker()``.

:class:`StageProgress` is a context manager. The caller names each step of
its job (``with progress.step("store_sales"): ...``); a daemon-free poller
thread (``elastream-spark-progress``) reads the active stages every
``interval`` seconds and shows one bar per running stage (completed tasks out
of the stage's tasks) under the current step. Finished stages disappear; each
step keeps one line with its elapsed time.

Threading: ``step`` is called from the job's thread; the poller thread only
reads the status tracker and updates the rich ``Progress`` (which is
thread-safe). ``__exit__`` stops the poller through an event and joins it.
With a Spark Connect session (no ``sparkContext``) or ``enabled=False`` the
steps are still timed but nothing is drawn.

:class:`BatchLog` records the progress Spark reports for each micro-batch of
the streaming queries started while it listens (a ``StreamingQueryListener``):
input rows and duration per batch, from which :func:`steady_state` computes
the steady-state throughput (the batches with input after each query's first)
and :func:`batch_percentiles_ms` the batches' duration percentiles. Spark calls
the listener on its own thread; the log is guarded by a lock.

Example::

    with StageProgress(spark, console) as progress:
        with progress.step("store_sales"):
            frame.write.parquet(path)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

THREAD_NAME = "elastream-spark-progress"


class StageProgress:
    """Rich progress bars of the running Spark stages, grouped under named steps."""

    def __init__(self, spark: Any, console: Console | None = None, *, enabled: bool = True,
                 interval: float = 0.2) -> None:
        self._tracker = _status_tracker(spark) if enabled else None
        self._interval = interval
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=console or Console(stderr=True), transient=False,
                                  disable=self._tracker is None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stage_tasks: dict[int, TaskID] = {}
        self._lock = threading.Lock()
        self._step_label = ""
        self.step_seconds: dict[str, float] = {}

    def __enter__(self) -> StageProgress:
        if self._tracker is not None:
            self._progress.start()
            self._thread = threading.Thread(target=self._poll, name=THREAD_NAME)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._progress.stop()

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Time one step of the job and show its stages under ``label`` while it runs."""
        task = self._progress.add_task(f"[bold]{label}[/]", total=None)
        with self._lock:
            self._step_label = label
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.step_seconds[label] = seconds
            self._refresh()  # retire the step's stages before it is marked done
            self._progress.update(task, total=1, completed=1, description=f"[green]✓[/] {label}")

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            self._refresh()

    def _refresh(self) -> None:
        if self._tracker is None:
            return
        try:
            active = set(self._tracker.getActiveStageIds())
            infos = {sid: self._tracker.getStageInfo(sid) for sid in active}
        except Exception:  # noqa: BLE001 - the context may be stopping; the display is best effort
            return
        with self._lock:
            for sid in [s for s in self._stage_tasks if s not in active]:
                self._progress.remove_task(self._stage_tasks.pop(sid))
            for sid, info in infos.items():
                if info is None:
                    continue
                if sid not in self._stage_tasks:
                    self._stage_tasks[sid] = self._progress.add_task(
                        f"  {self._step_label} · stage {sid}", total=max(1, info.numTasks))
                self._progress.update(self._stage_tasks[sid], total=max(1, info.numTasks),
                                      completed=info.numCompletedTasks)


def _status_tracker(spark: Any) -> Any | None:
    try:
        return spark.sparkContext.statusTracker()
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        return None


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One micro-batch as Spark's streaming progress reports it."""

    query_id: str
    batch_id: int
    input_rows: int
    duration_ms: int


class BatchLog:
    """The micro-batches of every streaming query started on ``spark`` while the log listens.

    Example::

        with BatchLog(spark) as log:
            query = frame.writeStream.start(); query.awaitTermination()
        steady_state(log.batches)   # (rows, seconds) of the batches after each query's first
    """

    def __init__(self, spark: Any, *, drain_s: float = 10.0) -> None:
        self._spark = spark
        self._drain_s = drain_s
        self._lock = threading.Condition()
        self._batches: list[BatchProgress] = []
        self._started: set[str] = set()
        self._ended: set[str] = set()
        self._listener: Any = None

    @property
    def batches(self) -> list[BatchProgress]:
        """The batches seen so far, in the order Spark reported them."""
        with self._lock:
            return list(self._batches)

    def __enter__(self) -> BatchLog:
        self._listener = _make_listener(self)
        self._spark.streams.addListener(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        # Spark reports on its listener bus after the fact: wait (briefly) for every started query's end.
        with self._lock:
            self._lock.wait_for(lambda: self._started <= self._ended, timeout=self._drain_s)
        try:
            self._spark.streams.removeListener(self._listener)
        except Exception:  # noqa: BLE001 - a session stopping: nothing left to listen to
            pass

    def _on_started(self, query_id: str) -> None:
        with self._lock:
            self._started.add(query_id)

    def _on_progress(self, progress: Any) -> None:
        batch = BatchProgress(str(progress.id), int(progress.batchId), int(progress.numInputRows),
                              int(progress.batchDuration))
        with self._lock:
            self._batches.append(batch)

    def _on_ended(self, query_id: str) -> None:
        with self._lock:
            self._ended.add(query_id)
            self._lock.notify_all()


def _make_listener(log: BatchLog) -> Any:
    """A ``StreamingQueryListener`` feeding ``log`` (pyspark imported only here)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's names
            log._on_started(str(event.id))

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            log._on_progress(event.progress)

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            log._on_ended(str(event.id))

    return _Listener()


def steady_batches(batches: Sequence[BatchProgress]) -> list[BatchProgress]:
    """The batches with input rows after each query's first such batch (which carries the query's one-time costs)."""
    seen: set[str] = set()
    kept = []
    for batch in sorted(batches, key=lambda b: (b.query_id, b.batch_id)):
        if batch.input_rows <= 0:
            continue
        if batch.query_id in seen:
            kept.append(batch)
        seen.add(batch.query_id)
    return kept


def steady_state(batches: Sequence[BatchProgress]) -> tuple[int, float]:
    """``(input rows, seconds)`` of the :func:`steady_batches`: Spark's steady-state throughput is their ratio.

    Example: batches of 1, 100 and 100 rows taking 900, 50 and 50 ms → ``(200, 0.1)``
    """
    kept = steady_batches(batches)
    return sum(b.input_rows for b in kept), sum(b.duration_ms for b in kept) / 1e3


def batch_percentiles_ms(batches: Sequence[BatchProgress], qs: Sequence[float] = (50, 99)) -> list[float | None]:
    """Nearest-rank percentiles of the :func:`steady_batches`' durations, ms (None without such batches)."""
    durations = sorted(float(b.duration_ms) for b in steady_batches(batches))
    if not durations:
        return [None for _ in qs]
    return [durations[min(len(durations), max(1, math.ceil(q / 100 * len(durations)))) - 1] for q in qs]
