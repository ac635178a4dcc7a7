"""The driver's two ends of a Spark run: feeding the stream files in order, and collecting what reaches the sinks.

:class:`Feeder` publishes one step of files (plus a marker file) at a time into
the folder the query watches, atomically; :class:`Collector` is the
``foreachBatch`` target that keeps each sink's (order key, pickled item) rows
and notes when each control row arrived (:mod:`elastream.spark.streaming`
explains the protocol).

Threading: the driver thread calls ``Feeder.place`` and ``Collector.wait_for``;
Spark calls the collector from its own streaming thread. The collector's
condition variable guards its rows and arrival times.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
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
    """The ``foreachBatch`` target: keeps (order key, pickled item) per sink and stamps control rows."""

    def __init__(self, sinks: Mapping[int, str]) -> None:
        self.sinks = dict(sinks)
        self.rows: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in self.sinks.values()}
        self.arrived: dict[bytes, float] = {}
        self.batches = 0
        self._cond = threading.Condition()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.select("k", "v", "r").collect()
        now = time.perf_counter()
        with self._cond:
            self.batches += 1
            for k, v, r in rows:
                if r == CONTROL_ROUTE:
                    self.arrived.setdefault(bytes(k), now)
                else:
                    self.rows[self.sinks[r]].append((bytes(k), bytes(v)))
            self._cond.notify_all()

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
        with self._cond:
            rows = {name: sorted(kept) for name, kept in self.rows.items()}
        return {name: [loads(v) for _, v in kept] for name, kept in rows.items()}


class Feeder:
    """Places the stream files into the watched folder one step at a time (:mod:`elastream.spark.streaming`)."""

    def __init__(self, root: Path):
        self.root = root
        self.watched = root / "in"
        self._staging = root / "staging"
        self.watched.mkdir(parents=True)
        self._staging.mkdir()

    def place(self, step: int, files: Sequence[tuple[int, Path]], control: int) -> float:
        """Link ``files`` (position, path) and a control file, then publish them as one folder; the time."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = self._staging / f"{step:09d}"
        folder.mkdir()
        for position, path in files:
            _link(path, folder / f"d{position:09d}.parquet")
        pq.write_table(pa.table({CTL_COLUMN: pa.array([control], pa.int64())}), folder / f"c{step:09d}.parquet")
        folder.rename(self.watched / folder.name)  # atomic: a listing sees the whole step or nothing
        return time.perf_counter()


def _link(src: Path, dst: Path) -> None:
    try:
        os.symlink(src.resolve(), dst)
    except OSError:  # a file system without symbolic links
        shutil.copyfile(src, dst)
