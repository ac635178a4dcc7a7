"""File sinks: :class:`ToCSV`, :class:`ToJSONL`, :class:`ToParquet`.

Records may be dicts, dataclasses, named tuples (such as
:class:`~elastream.ops.WindowResult`), or tuples and lists given
``columns=[...]`` (:class:`~elastream.ops.records.RowShape`); the first record
is checked as soon as it arrives, so a sink that cannot write the stream says
so at once, not when the run ends.

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
from elastream.ops.records import (RecordShapeError, RowShape, WrittenFile, field_names,
                                   format_value, is_record_object)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from elastream.operators.context_api import OperatorContext


class _FileSink(FunctionOperator):
    """Common shape of the file sinks: one input, no output, a path and a row count."""

    kind = "sink"

    def __init__(self, path: str | os.PathLike[str], columns: Sequence[str] | None = None):
        super().__init__(inputs=1, outputs=0)
        self.path = os.fspath(path)
        self.columns = list(columns) if columns is not None else None
        self.rows = 0

    def _bad_record(self, number: int, record: Any, error: Exception) -> Exception:
        """The error for record ``number`` (1-based), continuing ``error``'s sentence about it."""
        kind = ValueError if isinstance(error, ValueError) else TypeError
        return kind(f"{self.describe()}: record {number} {format_value(record)} {error}")

    def result(self) -> WrittenFile:
        """Where the rows went and how many were written."""
        return WrittenFile(self.path, self.rows)

    def describe(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


class ToCSV(_FileSink):
    """Write records as CSV rows, in arrival order.

    The first record decides the columns: a dict's keys, a dataclass's or a
    named tuple's fields, or ``columns`` when given (it picks and orders the
    fields; it names a tuple's values). Dict records: a missing field is
    written empty and a field not in the header is an error. Tuple or list
    records: written as they are, with a header only when ``columns`` is
    given; every row must have the same width.

    Example::

        src >> flow.add(es.ops.ToCSV(tmp / "out.csv"), name="out")
        result.outputs["out"]   # WrittenFile(path=..., rows=...)
    """

    def __init__(self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None,
                 delimiter: str = ",", encoding: str = "utf-8"):
        super().__init__(path, columns)
        self.delimiter = delimiter
        self.encoding = encoding
        self._file: Any = None
        self._writer: Any = None
        self._shape: RowShape | None = None

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._shape = None
        # newline="": the csv writer emits its own "\r\n" terminators.
        self._file = open(self.path, "w", encoding=self.encoding, newline="")
        self._writer = csv.writer(self._file, delimiter=self.delimiter)
        if self.columns is not None:
            # Known columns: the header goes out now, so even an empty stream leaves one.
            self._writer.writerow(self.columns)

    def on_batch(self, items: list, port: int) -> None:
        if not items:
            return
        if self._shape is None:
            self._shape = self._first_shape(items[0])
        values = self._shape.values
        rows: list[Sequence[Any]] = []
        try:
            for record in items:
                rows.append(values(record))
        except (TypeError, ValueError) as exc:
            raise self._bad_record(self.rows + len(rows) + 1, record, exc) from None
        finally:
            # The rows before a bad record are accepted: write them whatever happens.
            self._writer.writerows(rows)
            self.rows += len(rows)

    def _first_shape(self, first: Any) -> RowShape:
        try:
            shape = RowShape.of(first, self.columns)
        except RecordShapeError as exc:
            raise self._bad_record(self.rows + 1, first, exc) from None
        if self.columns is None and shape.kind != "sequence":
            self._writer.writerow(shape.names)  # the first record named the columns
        return shape

    def close(self) -> None:
        self._writer = None
        if self._file is not None:
            self._file.close()  # flushes
            self._file = None


class ToJSONL(_FileSink):
    """Write each record as one line of JSON (UTF-8), in arrival order.

    Dicts are written as they are (what :class:`~elastream.ops.FromJSONL`
    reads back); dataclasses and named tuples (such as
    :class:`~elastream.ops.WindowResult`) as objects with their field names,
    and dataclasses nested in a record too; any other JSON-serialisable value
    as it is. With ``columns`` every record is written as an object of those
    fields (a tuple's or list's values, in order).

    Example::

        src >> flow.add(es.ops.ToJSONL(tmp / "out.jsonl"), name="out")
    """

    def __init__(self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None):
        super().__init__(path, columns)
        self._file: Any = None
        self._encode = json.JSONEncoder(ensure_ascii=False, default=_json_default).encode
        self._shapes: dict[type, RowShape | None] = {}

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._shapes = {}
        self._file = open(self.path, "w", encoding="utf-8", newline="\n")

    def on_batch(self, items: list, port: int) -> None:
        lines: list[str] = []
        try:
            for record in items:
                lines.append(self._line(record, self.rows + len(lines) + 1))
        finally:
            # The lines before a bad record are accepted: write them whatever happens.
            if lines:
                self._file.write("\n".join(lines) + "\n")
                self.rows += len(lines)

    def _line(self, record: Any, number: int) -> str:
        try:
            value = self._json_value(record)
        except (TypeError, ValueError) as exc:
            raise self._bad_record(number, record, exc) from None
        try:
            return self._encode(value)
        except (TypeError, ValueError) as exc:
            kind = ValueError if isinstance(exc, ValueError) else TypeError
            raise self._bad_record(number, record, kind(f"cannot be written as JSON: {exc}")) from exc

    def _json_value(self, record: Any) -> Any:
        """What to encode for ``record``: an object for a record with named fields (or given columns)."""
        kind = type(record)
        if kind is dict and self.columns is None:
            return record
        try:
            shape = self._shapes[kind]
        except KeyError:
            named = self.columns is not None or is_record_object(record)
            shape = self._shapes[kind] = RowShape.of(record, self.columns) if named else None
        return record if shape is None else shape.as_dict(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _json_default(value: Any) -> Any:
    """A dataclass nested in a record, as an object of its fields; anything else is not JSON."""
    if is_record_object(value):
        return dict(zip(field_names(value), (getattr(value, n) for n in field_names(value))))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class ToParquet(_FileSink):
    """Write records to a Parquet file (pyarrow), in arrival order.

    Records are dicts, dataclasses or named tuples (such as
    :class:`~elastream.ops.WindowResult`), whose field names are the
    columns, or tuples and lists given ``columns=[...]``; ``columns`` also
    picks and orders the fields of the others. The first record is checked at
    once: one that Parquet cannot hold fails when it arrives, naming it.

    Rows are buffered and written as one row group per ``row_group_rows``
    rows; ``close()`` writes the rest. ``schema`` (a ``pyarrow.Schema``) fixes
    the columns and types; without it they are inferred from the first row
    group, so pass one when a column may be all-null at first. A record that
    does not fit the schema (wrong type, a field the schema lacks) is an error
    naming its row number; the rows before it are still written.

    Example::

        src >> flow.add(es.ops.ToParquet(tmp / "out.parquet", row_group_rows=10_000), name="out")
        windows.sink(es.ops.ToParquet(tmp / "sessions.parquet"))   # WindowResult: key, start, end, value
    """

    def __init__(self, path: str | os.PathLike[str], *, schema: pa.Schema | None = None,
                 row_group_rows: int = 65536, columns: Sequence[str] | None = None):
        super().__init__(path, columns)
        if row_group_rows < 1:
            raise ValueError(f"ToParquet({self.path!r}): row_group_rows must be >= 1, got {row_group_rows}")
        self.schema = schema
        self.row_group_rows = int(row_group_rows)
        self._buffer: list[dict[str, Any]] = []
        self._writer: Any = None
        self._schema: pa.Schema | None = None
        self._shape: RowShape | None = None

    def open(self, ctx: OperatorContext) -> None:
        self.rows = 0
        self._buffer = []
        self._writer = None
        self._shape = None
        self._schema = self.schema
        if self._schema is not None:
            self._open_writer(self._schema)  # an unwritable path fails now, not at the end

    def on_batch(self, items: list, port: int) -> None:
        if not items:
            return
        if self._shape is None:
            self._shape = self._first_shape(items[0])
        self._take(self._shape, items)
        buffer = self._buffer
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

    def _take(self, shape: RowShape, items: list) -> None:
        """Buffer ``items`` as dicts; a record unlike the first fails, after the ones before it."""
        if shape.kind == "dict" and self.columns is None and all(type(r) is dict for r in items):
            self._buffer.extend(items)  # their fields are checked against the schema when written
            return
        as_dict, buffer = shape.as_dict, self._buffer
        for record in items:
            try:
                buffer.append(as_dict(record))
            except (TypeError, ValueError) as exc:
                raise self._bad_record(self.rows + len(buffer) + 1, record, exc) from None

    def _first_shape(self, first: Any) -> RowShape:
        """The shape of the first record, once it is known to convert to an Arrow row."""
        import pyarrow as pa

        try:
            shape = RowShape.of(first, self.columns)
            if shape.names is None:
                raise RecordShapeError(f"is a {type(first).__name__} and Parquet needs column names: pass "
                                       "columns=[...], or send dicts, dataclasses or named tuples")
            row = shape.as_dict(first)
        except (TypeError, ValueError) as exc:
            raise self._bad_record(1, first, exc) from None
        try:
            pa.RecordBatch.from_pylist([row], schema=self._schema)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise self._bad_record(1, first, TypeError(f"cannot be written to Parquet: {exc}")) from exc
        return shape

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
