"""The source stream cut into feeding steps: whole files, or slices of a fixed number of rows.

The driver feeds a Spark run one step at a time (:mod:`elastream.spark.streaming`),
and each micro-batch holds whole steps, so the step size is the micro-batch
size. :class:`StreamSteps` cuts the source's files in stream order either into
groups of ``files_per_batch`` files (linked into the step, no copy) or into
steps of ``rows_per_batch`` rows, which it writes as ``slices`` Parquet files
(so that several Spark tasks read a step at once). A file's name is its
position in the stream (``d000000042.parquet``; slice ``j`` of row step ``i``
is at ``i * SLICE_STRIDE + j``): the source rows' order keys are (position,
row in file), so any cut keeps the stream order, and a resumed run may write
its steps in another number of slices.

Threading: used by the driver thread only. Reading is sequential: a step's
slices are read from the cached row group its rows are in.

Example::

    steps = StreamSteps.plan(files, ("user", "x"), rows_per_batch=50_000)
    steps.use_slices(2)
    len(steps), steps.rows_before(1)       # data steps, rows of the first step
    steps.put(1, folder)                   # writes d000000064.parquet and d000000065.parquet
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

#: Rows per micro-batch when neither files nor rows per batch are given. Measured on TPCx-BB q02/q04 (scale
#: 0.05, local[2], 2 shared cores): throughput grows with the batch, as each micro-batch has a fixed cost
#: (planning, every stateful operator committing its state store); 200,000 rows ran at 1.2-1.9x the
#: tuples/s of 50,000-100,000 while keeping a batch's memory bounded on larger data.
DEFAULT_ROWS_PER_BATCH = 200_000
#: A row step is written as several files only when each gets at least this many rows.
MIN_SLICE_ROWS = 5_000
#: Most slices of a row step (positions of step i's slices start at i * SLICE_STRIDE).
SLICE_STRIDE = 64


@dataclass
class StreamSteps:
    """The stream's data steps (module docstring): by ``files_per_batch`` files, or by ``rows_per_batch`` rows."""

    files: tuple[Path, ...]
    file_rows: tuple[int, ...]
    columns: tuple[str, ...] | None
    files_per_batch: int | None = None
    rows_per_batch: int | None = None
    slices: int = 1
    _starts: list[int] = field(default_factory=list, repr=False)
    _cached: tuple[tuple[int, int], Any] | None = field(default=None, repr=False)

    @classmethod
    def plan(cls, files: Sequence[Path], columns: Sequence[str] | None, *, files_per_batch: int | None = None,
             rows_per_batch: int | None = None) -> StreamSteps:
        """Steps over ``files`` (stream order): ``files_per_batch`` files each, else ``rows_per_batch`` rows each.

        With neither given, steps of :data:`DEFAULT_ROWS_PER_BATCH` rows.
        """
        import pyarrow.parquet as pq

        if files_per_batch is not None and rows_per_batch is not None:
            raise ValueError("give files_per_batch or rows_per_batch, not both")
        for name, value in (("files_per_batch", files_per_batch), ("rows_per_batch", rows_per_batch)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if files_per_batch is None and rows_per_batch is None:
            rows_per_batch = DEFAULT_ROWS_PER_BATCH
        file_rows = tuple(pq.ParquetFile(f).metadata.num_rows for f in files)
        return cls(tuple(Path(f) for f in files), file_rows, tuple(columns) if columns is not None else None,
                   files_per_batch, rows_per_batch)

    def use_slices(self, tasks: int) -> None:
        """Write each row step as up to ``tasks`` files (of at least :data:`MIN_SLICE_ROWS` rows each)."""
        if self.rows_per_batch is not None:
            self.slices = max(1, min(int(tasks), self.rows_per_batch // MIN_SLICE_ROWS, SLICE_STRIDE))

    def __post_init__(self) -> None:
        self._starts = [0, *accumulate(self.file_rows)]

    @property
    def total_rows(self) -> int:
        return self._starts[-1]

    def __len__(self) -> int:
        """How many data steps the stream makes (at least one)."""
        if self.files_per_batch is not None:
            return max(1, -(-len(self.files) // self.files_per_batch))
        assert self.rows_per_batch is not None
        return max(1, -(-self.total_rows // self.rows_per_batch))

    def rows_before(self, step: int) -> int:
        """Rows in the first ``step`` data steps."""
        if self.files_per_batch is not None:
            return self._starts[min(step * self.files_per_batch, len(self.files))]
        assert self.rows_per_batch is not None
        return min(step * self.rows_per_batch, self.total_rows)

    def describe(self) -> dict[str, Any]:
        """What a resumed run must match (the checkpoint's manifest)."""
        return {"files": [str(f) for f in self.files], "file_rows": list(self.file_rows),
                "columns": list(self.columns) if self.columns is not None else None,
                "files_per_batch": self.files_per_batch, "rows_per_batch": self.rows_per_batch}

    def put(self, step: int, folder: Path) -> None:
        """Place data step ``step`` (0-based) into ``folder``: linked files, or its rows written as slices."""
        if self.files_per_batch is not None:
            first = step * self.files_per_batch
            for position in range(first, min(first + self.files_per_batch, len(self.files))):
                _link(self.files[position], folder / data_file_name(position))
            return
        import pyarrow.parquet as pq

        table = self._rows(self.rows_before(step), self.rows_before(step + 1))
        size = -(-table.num_rows // self.slices) if table.num_rows else 0
        for j in range(self.slices):
            part = table.slice(j * size, size)
            if part.num_rows or j == 0:
                pq.write_table(part, folder / data_file_name(step * SLICE_STRIDE + j))

    def _rows(self, start: int, end: int) -> Any:
        """The stream's rows ``start`` to ``end`` (exclusive) as one pyarrow Table (the chosen columns)."""
        import pyarrow as pa

        pieces = []
        at = start
        while at < end:
            f = bisect_right(self._starts, at) - 1
            group, group_start, group_rows = self._row_group_at(f, at - self._starts[f])
            offset = at - self._starts[f] - group_start
            take = min(end - at, group_rows - offset)
            pieces.append(group.slice(offset, take))
            at += take
        if not pieces:
            return self._row_group_at(0, 0)[0].slice(0, 0)
        return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]

    def _row_group_at(self, f: int, row: int) -> tuple[Any, int, int]:
        """The row group of file ``f`` holding its row ``row``: (table, its first row in the file, its rows)."""
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(self.files[f]).metadata
        first = 0
        for g in range(meta.num_row_groups):
            rows = meta.row_group(g).num_rows
            if row < first + rows or g == meta.num_row_groups - 1:
                break
            first += rows
        if self._cached is None or self._cached[0] != (f, g):
            columns = list(self.columns) if self.columns is not None else None
            self._cached = ((f, g), pq.ParquetFile(self.files[f]).read_row_group(g, columns=columns))
        table = self._cached[1]
        return table, first, table.num_rows


def data_file_name(position: int) -> str:
    """The name of the stream's ``position``-th data file in a step (the source reads the position back)."""
    return f"d{position:09d}.parquet"


def _link(src: Path, dst: Path) -> None:
    try:
        os.symlink(src.resolve(), dst)
    except OSError:  # a file system without symbolic links
        shutil.copyfile(src, dst)
