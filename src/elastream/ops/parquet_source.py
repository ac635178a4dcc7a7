"""The Parquet file source :class:`FromParquet`: rows of one file, a folder of part files or a list of files.

pyarrow reads the files (imported on first use: building a flow does not load
it); :func:`~elastream.ops.arrow_rows.rows_of` turns each decoded batch into
dicts.

Threading: a source runs in one worker at a time, though not always the same
worker, so the open file is used by one thread at a time only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from elastream.operators.base import SourceOperator
from elastream.operators.spec import Declared, OperatorSpec
from elastream.ops.arrow_rows import rows_of

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.context_api import OperatorContext

__all__ = ["FromParquet"]


class FromParquet(SourceOperator):
    """Emit the rows of one or more Parquet files as dicts, in order (pyarrow).

    ``path`` is a file, a folder or a list of files. A folder is read in
    sorted name order, skipping names that start with ``_`` or ``.`` and
    ``.crc`` files (what Spark writes next to its ``part-…`` files, whose name
    order is the written order); a list is read in the order given, so the
    caller decides the stream order. ``columns`` selects columns (a name may
    be a prefix of nested fields, as in pyarrow); ``batch_rows`` is how many
    rows pyarrow decodes at a time (None: pyarrow's default).

    Every file's footer is checked when the source opens, before the first
    row is emitted: a missing file, a file that is not Parquet or a file
    without one of ``columns`` raises an error naming that file. A file that
    turns out to be corrupt while it is read raises naming it too.

    Example::

        flow.add(es.ops.FromParquet("trips.parquet", columns=["fare", "tip"]), name="trips")
        flow.add(es.ops.FromParquet("out/clicks/"), name="clicks")      # part files in name order
    """

    def __init__(self, path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                 columns: Sequence[str] | None = None, batch_rows: int | None = None):
        super().__init__(outputs=1)
        if isinstance(path, str | os.PathLike):
            self.path: str | None = os.fspath(path)
            self.paths: list[str] | None = None
        else:
            self.path, self.paths = None, [os.fspath(p) for p in path]
            if not self.paths:
                raise ValueError("FromParquet: the list of files is empty")
        if batch_rows is not None and batch_rows < 1:
            raise ValueError(f"{self.describe()}: batch_rows must be >= 1, got {batch_rows}")
        self.columns = list(columns) if columns is not None else None
        self.batch_rows = batch_rows
        self._files: list[str] = []
        self._next_file = 0
        self._current: str | None = None
        self._file: Any = None
        self._batches: Iterator[Any] | None = None
        self._rows: list[dict[str, Any]] = []
        self._pos = 0

    def files(self) -> list[str]:
        """The files this source reads, in read order (a folder is listed now)."""
        if self.paths is not None:
            return list(self.paths)
        assert self.path is not None
        if not os.path.isdir(self.path):
            return [self.path]
        names = sorted(n for n in os.listdir(self.path)
                       if not n.startswith(("_", ".")) and not n.endswith(".crc"))
        files = [os.path.join(self.path, n) for n in names if os.path.isfile(os.path.join(self.path, n))]
        if not files:
            raise ValueError(f"folder {self.path!r} holds no Parquet files")
        return files

    def spec(self) -> OperatorSpec:
        """Declares ``parquet_source`` with options ``files`` (a callable: the files in read order,
        a folder listed when it is called) and ``columns`` (a tuple, or None for every column)."""
        columns = tuple(self.columns) if self.columns is not None else None
        return self.spec_with(declared=Declared("parquet_source",
                                                options={"files": self.files, "columns": columns}))

    def open(self, ctx: OperatorContext) -> None:
        self._rows, self._pos, self._next_file = [], 0, 0
        self._files = self.files()
        # Check every footer first: a bad third file must fail before the first row leaves.
        for file in self._files:
            self._open_file(file).close()

    def _open_file(self, file: str) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            # A path (not a Python file object) lets pyarrow read without the GIL.
            pf = pq.ParquetFile(file)
        except FileNotFoundError:
            raise FileNotFoundError(2, "no such Parquet file", file) from None
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"cannot read {file!r} as Parquet: {exc}") from exc
        if self.columns is not None:
            # pyarrow silently yields nothing for an unknown column: check here.
            known = {path for i in range(pf.metadata.num_columns)
                     for path in _prefixes(pf.schema.column(i).path)}
            missing = [c for c in self.columns if c not in known]
            if missing:
                names = pf.schema_arrow.names
                pf.close()
                raise ValueError(f"{file!r} has no column(s) {missing}; it has {names}")
        return pf

    def _advance(self) -> bool:
        """Open the next file for reading; False when none is left."""
        self._close_file()
        if self._next_file >= len(self._files):
            return False
        self._current = self._files[self._next_file]
        self._next_file += 1
        self._file = self._open_file(self._current)
        kwargs: dict[str, Any] = {"columns": self.columns}
        if self.batch_rows is not None:
            kwargs["batch_size"] = self.batch_rows
        self._batches = self._file.iter_batches(**kwargs)
        return True

    def next_batch(self, max_items: int) -> list[dict[str, Any]] | None:
        import pyarrow as pa

        while self._pos >= len(self._rows):
            if self._batches is None and not self._advance():
                return None
            try:
                batch = next(self._batches)  # type: ignore[arg-type]
            except StopIteration:
                self._batches = None
                continue
            except (OSError, pa.ArrowException) as exc:
                raise ValueError(f"cannot read {self._current!r} as Parquet: {exc}") from exc
            self._rows, self._pos = rows_of(batch), 0
        start = self._pos
        self._pos += max_items
        return self._rows[start:self._pos]

    def _close_file(self) -> None:
        self._batches = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        self._close_file()
        self._rows = []

    def describe(self) -> str:
        if self.paths is not None:
            return f"FromParquet([{self.paths[0]!r}, … {len(self.paths)} files])"
        return f"FromParquet({self.path!r})"


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
