"""File sinks: :class:`ToCSV`, :class:`ToJSONL`, :class:`ToParquet`.

A sink opens its file in ``open(ctx)``, writes in ``on_batch`` and flushes and
closes in ``close()``, which the runtime calls however the flow ends
(completion, an operator failure elsewhere, an explicit shutdown): every record
a sink accepted is on disk afterwards. When a record cannot be written, the
records of the same batch before it are written first, then the sink raises
naming the file. ``result()`` is a :class:`~elastream.ops.records.WrittenFile`.

Threading: a sink runs in one worker at a time (``max_workers`` is 1), so its
file is used by one thread at a time; records arrive in stream order.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from elastream.operators.base import FunctionOperator
from elastream.ops.records import WrittenFile, format_value

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from elastream.operators.context_api import OperatorContext


class _FileSink(FunctionOperator):
    """Common shape of the file sinks: one input, no output, a path and a row count."""

    kind = "sink"

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__(inputs=1, outputs=0)
        self.path = os.fspath(path)
        self.rows = 0

    def result(self) -> WrittenFile:
        """Where the rows went and how many were written."""
        return WrittenFile(self.path, self.rows)

    def describe(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


class ToCSV(_FileSink):
    """Write records as CSV rows, in arrival order.

    Dict records: the header is ``columns`` or, when not given, the first
    record's keys; a missing field is written empty and a field not in the
    header is an error. Tuple or list records: written as they are, with a
    header only when ``columns`` is given; every row must have the same width.

    Example::

        src >> flow.add(es.ops.ToCSV(tmp / "out.csv"), name="out")
        result.outputs["out"]   # WrittenFile(path=..., rows=...)
    """

    def __init__(self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None,
                 delimiter: str = ",", encoding: str = "utf-8"):
        super().__init__(path)
        self.columns = list(columns) if columns is not None else None
        self.delimiter = delimiter
        self.encoding = encoding
        self._file: Any = None
        self._writer: Any = None
        self._names: list[str] | None = None
        self._name_set: frozenset[str] = frozenset()
        self._width: int | None = None
        self._dicts: bool | None = None

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._names, self._width, self._dicts = None, None, None
        # newline="": the csv writer emits its own "\r\n" terminators.
        self._file = open(self.path, "w", encoding=self.encoding, newline="")
        self._writer = csv.writer(self._file, delimiter=self.delimiter)
        if self.columns is not None:
            # Known columns: the header goes out now, so even an empty stream leaves one.
            self._set_names(self.columns)

    def on_batch(self, items: list, port: int) -> None:
        if not items:
            return
        if self._dicts is None:
            self._start(items[0])
        to_row = self._dict_row if self._dicts else self._seq_row
        rows: list[Sequence[Any]] = []
        try:
            for record in items:
                rows.append(to_row(record))
        finally:
            # The rows before a bad record are accepted: write them whatever happens.
            self._writer.writerows(rows)
            self.rows += len(rows)

    def _start(self, first: Any) -> None:
        self._dicts = isinstance(first, dict)
        if self._names is None and self._dicts:
            self._set_names(list(first.keys()))

    def _set_names(self, names: list[str]) -> None:
        self._names, self._name_set, self._width = names, frozenset(names), len(names)
        self._writer.writerow(names)

    def _dict_row(self, record: Any) -> list[Any]:
        if not isinstance(record, dict):
            raise TypeError(f"ToCSV({self.path!r}): record {self.rows + 1} is a {type(record).__name__}, "
                            f"but this file holds dict records")
        names = self._names
        if record.keys() != self._name_set:
            extra = sorted(map(str, record.keys() - self._name_set))
            if extra:
                raise ValueError(f"ToCSV({self.path!r}): record {format_value(record)} has fields {extra} "
                                 f"not in the columns {names}")
        return [record.get(n) for n in names]  # type: ignore[union-attr]

    def _seq_row(self, record: Any) -> Sequence[Any]:
        if not isinstance(record, (tuple, list)):
            raise TypeError(f"ToCSV({self.path!r}): records must be dicts, tuples or lists, "
                            f"got {type(record).__name__}: {format_value(record)}")
        if self._width is None:
            self._width = len(record)
        elif len(record) != self._width:
            raise ValueError(f"ToCSV({self.path!r}): record {format_value(record)} has {len(record)} fields, "
                             f"expected {self._width}")
        return record

    def close(self) -> None:
        self._writer = None
        if self._file is not None:
            self._file.close()  # flushes
            self._file = None


class ToJSONL(_FileSink):
    """Write each record as one line of JSON (UTF-8), in arrival order.

    Records are usually dicts (what :class:`~elastream.ops.FromJSONL` reads
    back); any JSON-serialisable value is accepted.

    Example::

        src >> flow.add(es.ops.ToJSONL(tmp / "out.jsonl"), name="out")
    """

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__(path)
        self._file: Any = None
        self._encode = json.JSONEncoder(ensure_ascii=False).encode

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._file = open(self.path, "w", encoding="utf-8", newline="\n")

    def on_batch(self, items: list, port: int) -> None:
        encode = self._encode
        lines: list[str] = []
        try:
            for record in items:
                lines.append(encode(record))
        except (TypeError, ValueError) as exc:
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"ToJSONL({self.path!r}): record {self.rows + len(lines) + 1} "
                            f"{format_value(record)} cannot be written as JSON: {exc}") from exc
        finally:
            if lines:
                self._file.write("\n".join(lines) + "\n")
                self.rows += len(lines)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ToParquet(_FileSink):
    """Write dict records to a Parquet file (pyarrow), in arrival order.

    Rows are buffered and written as one row group per ``row_group_rows``
    rows; ``close()`` writes the rest. ``schema`` (a ``pyarrow.Schema``) fixes
    the columns and types; without it they are inferred from the first row
    group, so pass one when a column may be all-null at first. A record that
    does not fit the schema (wrong type, a field the schema lacks) is an error
    naming its row number; the rows before it are still written.

    Example::

        src >> flow.add(es.ops.ToParquet(tmp / "out.parquet", row_group_rows=10_000), name="out")
    """

    def __init__(self, path: str | os.PathLike[str], *, schema: pa.Schema | None = None,
                 row_group_rows: int = 65536):
        super().__init__(path)
        if row_group_rows < 1:
            raise ValueError(f"ToParquet({self.path!r}): row_group_rows must be >= 1, got {row_group_rows}")
        self.schema = schema
        self.row_group_rows = int(row_group_rows)
        self._buffer: list[dict[str, Any]] = []
        self._writer: Any = None
        self._schema: pa.Schema | None = None

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._buffer = []
        self._writer = None
        self._schema = self.schema
        if self._schema is not None:
            self._open_writer(self._schema)  # an unwritable path fails now, not at the end

    def on_batch(self, items: list, port: int) -> None:
        buffer = self._buffer
        buffer.extend(items)
        size = self.row_group_rows
        if len(buffer) >= size:
            full = len(buffer) - len(buffer) % size
            ready, self._buffer = buffer[:full], buffer[full:]
            try:
                for start in range(0, full, size):
                    self._write(ready[start:start + size])
            except BaseException:
                # Rows after a bad one are not written (as in the other sinks):
                # the file then holds exactly the stream up to the failure.
                self._buffer = []
                raise

    def close(self) -> None:
        import pyarrow as pa

        rest, self._buffer = self._buffer, []
        try:
            if rest:
                self._write(rest)
            elif self._writer is None:
                # No rows and no schema: still leave a valid (empty) file behind.
                self._open_writer(pa.schema([]))
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def _open_writer(self, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(self.path, schema)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa

        try:
            if self._schema is None:
                self._schema = pa.RecordBatch.from_pylist(rows).schema
            names = set(self._schema.names)
            # from_pylist drops fields the schema lacks; refuse rather than lose data.
            for row in rows:
                if not isinstance(row, dict) or not row.keys() <= names:
                    raise TypeError("not a dict with the schema's fields")
            batch = pa.RecordBatch.from_pylist(rows, schema=self._schema)
        except (TypeError, ValueError, pa.ArrowException):
            raise self._salvage(rows)  # noqa: B904 - the error carries its own __cause__
        if self._writer is None:
            self._open_writer(self._schema)
        self._writer.write_batch(batch, row_group_size=self.row_group_rows)
        self.rows += len(rows)

    def _salvage(self, rows: list[dict[str, Any]]) -> Exception:
        """Slow path after a failed conversion: write the rows before the first bad one.

        Returns the error to raise, naming that row (its ``__cause__`` says why).
        """
        import pyarrow as pa

        if self._schema is None and rows and isinstance(rows[0], dict):
            self._schema = pa.RecordBatch.from_pylist(rows[:1]).schema
        schema = self._schema
        names = set(schema.names) if schema is not None else set()
        for i, row in enumerate(rows):
            try:
                if not isinstance(row, dict):
                    raise TypeError(f"records must be dicts, got {type(row).__name__}")
                extra = sorted(map(str, row.keys() - names))
                if extra:
                    raise ValueError(f"fields {extra} are not in the schema")
                pa.RecordBatch.from_pylist([row], schema=schema)
            except (TypeError, ValueError, pa.ArrowException) as exc:
                if i:
                    if self._writer is None:
                        self._open_writer(schema)  # type: ignore[arg-type]
                    self._writer.write_batch(pa.RecordBatch.from_pylist(rows[:i], schema=schema),
                                             row_group_size=self.row_group_rows)
                    self.rows += i
                error = ValueError(f"ToParquet({self.path!r}): row {self.rows + 1} {format_value(row)} "
                                   f"does not fit the schema ({_describe_schema(schema)}): {exc}")
                error.__cause__ = exc
                return error
        return ValueError(f"ToParquet({self.path!r}): rows {self.rows + 1}..{self.rows + len(rows)} "
                          f"could not be converted together to the schema ({_describe_schema(schema)})")


def _describe_schema(schema: pa.Schema | None) -> str:
    if schema is None:
        return "none inferred"
    return ", ".join(f"{field.name}: {field.type}" for field in schema)
