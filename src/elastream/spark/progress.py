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

Example::

    with StageProgress(spark, console) as progress:
        with progress.step("store_sales"):
            frame.write.parquet(path)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
