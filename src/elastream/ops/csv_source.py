"""The CSV file source :class:`FromCSV`: rows as dicts, malformed rows through the error policy.

A row is malformed when its field count differs from the header's (too many
*or too few* fields), a type converter raises, the csv module rejects it or
its text cannot be decoded; :class:`~elastream.ops.records.RecordSource`
applies the error policy. Line numbers are 1-based physical lines (a quoted
field may span several).

Threading: a source runs in one worker at a time, though not always the same
worker, so the open file and the csv reader are used by one thread at a time only.
"""

from __future__ import annotations

import codecs
import csv
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from elastream.errors import RecordError
from elastream.ops.records import ErrorPolicy, RecordSource, format_value
from elastream.ops.text_decoding import printable, reading_encoding, strip_newline, undecodable_reason

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.context_api import OperatorContext

__all__ = ["FromCSV"]


class FromCSV(RecordSource):
    """Emit the rows of a CSV file as dicts keyed by column name, in order.

    Column names come from the header row (``header=True``) or from
    ``columns``; with both, ``columns`` renames the header's fields. ``types``
    maps a column to a converter (``int``, ``float``, any callable taking the
    field's text). A row is malformed when it has more or fewer fields than
    there are columns, a converter raises, the csv module rejects it or its
    text cannot be decoded; ``on_error`` says what then happens (see :class:`~elastream.ops.records.ErrorPolicy`).
    Blank lines are skipped. A bad header always raises RecordError: without it
    no row can be read.

    Example::

        src = flow.add(es.ops.FromCSV("trips.csv", types={"fare": float}, on_error="skip"), name="trips")
    """

    def __init__(self, path: str | os.PathLike[str], *, header: bool = True, columns: Sequence[str] | None = None,
                 types: Mapping[str, Callable[[str], Any]] | None = None, delimiter: str = ",",
                 on_error: str | ErrorPolicy = "fail", encoding: str = "utf-8"):
        super().__init__(path, on_error)
        if not header and columns is None:
            raise ValueError(f"FromCSV({self.path!r}): header=False needs columns=[...]")
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ValueError(f"FromCSV({self.path!r}): delimiter must be one character, got {delimiter!r}")
        self.header = header
        self.columns = list(columns) if columns is not None else None
        if self.columns is not None and len(set(self.columns)) != len(self.columns):
            raise ValueError(f"FromCSV({self.path!r}): duplicate names in columns {self.columns}")
        self.types = dict(types or {})
        for name, fn in self.types.items():
            if not callable(fn):
                raise ValueError(f"FromCSV({self.path!r}): types[{name!r}] is not callable: {fn!r}")
        if self.columns is not None:
            self._check_types(self.columns)
        self.delimiter = delimiter
        self.encoding = encoding
        codecs.lookup(encoding)
        self._file: Any = None
        self._reader: Iterator[list[str]] | None = None
        self._raw: list[str] = []
        self._bad: str | None = None
        self._phys = 0
        self._names: list[str] = []
        self._converters: list[tuple[str, Callable[[str], Any]]] = []

    def _check_types(self, names: Sequence[str]) -> None:
        unknown = sorted(set(self.types) - set(names))
        if unknown:
            raise ValueError(f"FromCSV({self.path!r}): types name unknown columns {unknown} (columns: {list(names)})")

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._raw, self._bad, self._phys = [], None, 0
        # newline="" hands line endings to the csv module, which needs them to
        # keep newlines inside quoted fields (csv module documentation).
        self._file = open(self.path, encoding=reading_encoding(self.encoding), errors="surrogateescape", newline="")
        self._reader = csv.reader(self._physical_lines(), delimiter=self.delimiter)
        try:
            names = self._read_header() if self.header else self.columns
        except BaseException:
            # The runtime calls close() only after a successful open().
            self.close()
            raise
        self._names = list(names or [])
        self._converters = [(name, fn) for name, fn in self.types.items()]

    def _physical_lines(self) -> Iterator[str]:
        # The csv reader pulls lines only as it needs them, so when it returns a
        # record, _raw holds exactly that record's lines and _bad its decoding error.
        raw = self._raw
        for line in self._file:
            self._phys += 1
            raw.append(line)
            if self._bad is None and not line.isascii():
                self._bad = undecodable_reason(line, self.encoding)
            yield line

    def _record_start(self) -> int:
        return self._phys - len(self._raw) + 1

    def _raw_text(self) -> str:
        return strip_newline(printable("".join(self._raw)))

    def _next_row(self) -> list[str] | None:
        """The next row (None at the end); RecordError for rows the csv module rejects."""
        self._raw.clear()
        self._bad = None
        try:
            return next(self._reader)  # type: ignore[arg-type]
        except StopIteration:
            return None
        except csv.Error as exc:
            raise RecordError(self.path, self._record_start(), f"malformed CSV: {exc}") from exc

    def _read_header(self) -> list[str] | None:
        row: list[str] | None = []
        while row == []:  # leading blank lines are not a header
            row = self._next_row()
        if row is None:
            return self.columns
        line = self._record_start()
        if self._bad is not None:
            raise RecordError(self.path, line, f"header: {self._bad}")
        if len(set(row)) != len(row):
            dupes = sorted({n for n in row if row.count(n) > 1})
            raise RecordError(self.path, line, f"header has duplicate column names {dupes}")
        if self.columns is not None:
            if len(self.columns) != len(row):
                raise RecordError(self.path, line,
                                  f"header has {len(row)} fields but columns names {len(self.columns)}")
            return self.columns
        self._check_types(row)
        return row

    def _read(self, out: list, max_items: int) -> None:
        names = self._names
        width = len(names)
        converters = self._converters
        for _ in range(max_items):
            try:
                row = self._next_row()
            except RecordError as exc:
                self._reject(exc.line, exc.reason, self._raw_text())
                continue
            if row is None:
                self._eof()
                return
            if not row:
                continue
            if self._bad is not None:
                self._reject(self._record_start(), self._bad, self._raw_text())
            elif len(row) != width:  # too few fields as well as too many: zip() would drop either silently
                self._reject(self._record_start(), f"expected {width} fields, got {len(row)}", self._raw_text())
            else:
                record = dict(zip(names, row))
                reason = _convert(record, converters) if converters else None
                if reason is None:
                    out.append(record)
                else:
                    self._reject(self._record_start(), reason, self._raw_text())

    def close(self) -> None:
        self._reader = None
        if self._file is not None:
            self._file.close()
            self._file = None


def _convert(record: dict[str, Any], converters: list[tuple[str, Callable[[str], Any]]]) -> str | None:
    """Apply the converters in place; the reason of the first failure, or None."""
    for name, fn in converters:
        value = record[name]
        try:
            record[name] = fn(value)
        except Exception as exc:  # noqa: BLE001 - any converter failure makes the row malformed
            fn_name = getattr(fn, "__name__", repr(fn))
            return f"column {name!r}: {fn_name}({format_value(value)}) failed: {type(exc).__name__}: {exc}"
    return None
