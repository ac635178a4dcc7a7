"""The driver's two ends of a Spark run: feeding the stream files in order, and collecting what reaches the sinks.

:class:`Feeder` publishes one step of files (plus a marker file) at a time into
the folder the query watches, atomically; :class:`Collector` is the
``foreachBatch`` target that keeps each sink's (order key, pickled item) rows
and notes when each control row arrived (:mod:`elastream.spark.streaming`
explains the protocol).

**Resuming.** When the run's folder is kept, the collector also writes each
micro-batch's rows to ``sink/<batch id>.pkl`` (a batch Spark runs again after a
failure replaces its file and its rows, so nothing counts twice), and a feeder
over a used folder knows which steps were already published. A query restarted
on the same checkpoint thus resumes: Spark replays the uncommitted batch from
its checkpoint, the driver feeds only the steps not yet published, and the
outputs of the batches before the failure come back from their files.

Threading: the driver thread calls ``Feeder.place`` and ``Collector.wait_for``;
Spark calls the collector from its own streaming thread. The collector's
condition variable guards its rows and arrival times.
"""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.spark.failures import query_error
from elastream.spark.layers import CTL_COLUMN
from elastream.spark.order_keys import loads
from elastream.spark.plan import CONTROL_ROUTE

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

#: How often a waiting driver looks whether the query died or the run was asked to stop.
POLL_S = 0.2


class RunStopped(Exception):
    """The run was asked to stop (its ``stop`` event was set) before the end of stream reached the sinks."""


class Collector:
    """The ``foreachBatch`` target: keeps (order key, pickled item) per sink and stamps control rows.

    ``folder``: where each batch's rows are also written (a kept run folder), and
    read back from when the run resumes (module docstring).
    """

    def __init__(self, sinks: Mapping[int, str], folder: Path | None = None) -> None:
        self.sinks = dict(sinks)
        self.folder = folder
        self.arrived: dict[bytes, float] = {}
        self._batches: dict[int, list[tuple[bytes, bytes, int]]] = {}
        self._cond = threading.Condition()
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self._load(folder)

    def _load(self, folder: Path) -> None:
        """Take back the batches a failed or stopped run of this folder saw (their control rows count as arrived)."""
        now = time.perf_counter()
        for path in sorted(folder.glob("*.pkl")):
            rows = pickle.loads(path.read_bytes())
            self._batches[int(path.stem)] = rows
            for k, _, r in rows:
                if r == CONTROL_ROUTE:
                    self.arrived.setdefault(k, now)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [(bytes(k), bytes(v), r) for k, v, r in frame.select("k", "v", "r").collect()]
        if self.folder is not None:
            _write_atomically(self.folder / f"{batch_id:012d}.pkl", pickle.dumps(rows, protocol=5))
        now = time.perf_counter()
        with self._cond:
            self._batches[batch_id] = rows  # a batch run again after a failure replaces its first run
            for k, _, r in rows:
                if r == CONTROL_ROUTE:
                    self.arrived.setdefault(k, now)
            self._cond.notify_all()

    @property
    def batches(self) -> int:
        """Micro-batches the sinks saw (those of a resumed run's earlier part included)."""
        with self._cond:
            return len(self._batches)

    def wait_for(self, key: bytes, query: Any, timeout_s: float | None, stop: threading.Event | None = None) -> float:
        """Block until the control row ``key`` reached a sink; its arrival time.

        Raises the query's error if it died, TimeoutError after ``timeout_s``,
        and :class:`RunStopped` once ``stop`` is set.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while key not in self.arrived:
                if stop is not None and stop.is_set():
                    raise RunStopped()
                if not query.isActive:
                    raise query_error(query.exception())
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"Spark streaming query did not finish within {timeout_s} s")
                self._cond.wait(POLL_S)
            return self.arrived[key]

    def outputs(self) -> dict[str, list[Any]]:
        """Each sink's items in order-key order (the sequential run's order)."""
        kept: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in self.sinks.values()}
        with self._cond:
            for rows in self._batches.values():
                for k, v, r in rows:
                    if r != CONTROL_ROUTE:
                        kept[self.sinks[r]].append((k, v))
        return {name: [loads(v) for _, v in sorted(rows)] for name, rows in kept.items()}


class Feeder:
    """Places the stream's steps into the watched folder one at a time (:mod:`elastream.spark.streaming`).

    Over a used run folder (``resume``), :attr:`published` holds the steps its
    earlier run published; a step it was still building is discarded.
    """

    def __init__(self, root: Path, resume: bool = False):
        self.root = root
        self.watched = root / "in"
        self._staging = root / "staging"
        if resume and self._staging.is_dir():
            shutil.rmtree(self._staging)  # a step the failed run had not published yet
        self.watched.mkdir(parents=True, exist_ok=resume)
        self._staging.mkdir(exist_ok=resume)
        self.published = {int(p.name) for p in self.watched.iterdir()} if resume else set()

    def place(self, step: int, put: Callable[[Path], None] | None, controls: Sequence[int]) -> float:
        """Let ``put`` place the step's data files, add a file of its ``controls`` (its marker's step number, -1
        for the end of stream), then publish them as one folder; the time."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = self._staging / f"{step:09d}"
        folder.mkdir()
        if put is not None:
            put(folder)
        pq.write_table(pa.table({CTL_COLUMN: pa.array(list(controls), pa.int64())}), folder / f"c{step:09d}.parquet")
        folder.rename(self.watched / folder.name)  # atomic: a listing sees the whole step or nothing
        self.published.add(step)
        return time.perf_counter()


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
