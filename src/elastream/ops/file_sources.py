"""File sources: :class:`TextLines`, :class:`FromCSV`, :class:`FromJSONL`, :class:`FromParquet`.

Each source opens its file in ``open(ctx)`` and closes it in ``close()``; the
runtime pulls batches with ``next_batch(max_items)``. CSV and JSON-lines sources
parse records and send malformed ones through their error policy
(:class:`~elastream.ops.records.RecordSource`); line numbers are 1-based
physical lines of the file.

Threading: a source runs in one worker at a time, though not always the same
worker, so the open file is used by one thread at a time only.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from elastream.errors import RecordError
from elastream.operators.base import SourceOperator
from elastream.ops.records import ErrorPolicy, RecordSource, format_value

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.context_api import OperatorContext

# Files are decoded with errors="surrogateescape": an undecodable byte becomes a
# lone surrogate U+DC80..U+DCFF, which a strict decoder never produces, so one
# search finds the exact line of a decoding error (a strict text file would
# only fail somewhere in an 8 KiB chunk, without a usable line number).
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _reading_encoding(encoding: str) -> str:
    # UTF-8 files written by spreadsheets often start with a BOM; "utf-8-sig"
    # drops it when present and otherwise decodes exactly like "utf-8".
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def _undecodable_reason(line: str, encoding: str) -> str | None:
    """Why ``line`` (decoded with surrogateescape) is not valid text, or None."""
    if line.isascii():
        return None
    m = _UNDECODABLE.search(line)
    if m is None:
        return None
    byte = ord(m.group()) - 0xDC00
    return f"not valid {encoding} text: byte 0x{byte:02x} at column {m.start() + 1}"


def _printable(text: str) -> str:
    """``text`` with undecodable bytes shown as ``\\xNN`` escapes."""
    return _UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def _strip_newline(line: str) -> str:
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


class TextLines(SourceOperator):
    """Emit each line of a text file as a ``str``, newline stripped, in order.

    A line that cannot be decoded with ``encoding`` raises
    :class:`~elastream.errors.RecordError` naming the file and line.

    Example::

        flow.add(es.ops.TextLines("access.log"), name="lines")
    """

    def __init__(self, path: str | os.PathLike[str], encoding: str = "utf-8"):
        super().__init__(outputs=1)
        self.path = os.fspath(path)
        self.encoding = encoding
        codecs.lookup(encoding)  # fail at build time on an unknown encoding
        self._file: Any = None
        self._line = 0

    def open(self, ctx: OperatorContext) -> None:
        self._line = 0
        self._file = open(self.path, encoding=_reading_encoding(self.encoding), errors="surrogateescape")

    def next_batch(self, max_items: int) -> list[str] | None:
        lines = list(islice(self._file, max_items))
        if not lines:
            return None
        first = self._line + 1
        self._line += len(lines)
        # One check for the whole batch; the per-line search runs only on failure.
        if not "".join(lines).isascii():
            for i, line in enumerate(lines):
                reason = _undecodable_reason(line, self.encoding)
                if reason is not None:
                    raise RecordError(self.path, first + i, reason)
        return [line[:-1] if line.endswith("\n") else line for line in lines]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def describe(self) -> str:
        return f"TextLines({self.path!r})"


class FromCSV(RecordSource):
    """Emit the rows of a CSV file as dicts keyed by column name, in order.

    Column names come from the header row (``header=True``) or from
    ``columns``; with both, ``columns`` renames the header's fields. ``types``
    maps a column to a converter (``int``, ``float``, any callable taking the
    field's text). A row is malformed when it has the wrong number of fields,
    a converter raises, the csv module rejects it or its text cannot be decoded;
    ``on_error`` says what then happens (see :class:`~elastream.ops.records.ErrorPolicy`).
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
        self._file = open(self.path, encoding=_reading_encoding(self.encoding), errors="surrogateescape", newline="")
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
                self._bad = _undecodable_reason(line, self.encoding)
            yield line

    def _record_start(self) -> int:
        return self._phys - len(self._raw) + 1

    def _raw_text(self) -> str:
        return _strip_newline(_printable("".join(self._raw)))

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
            elif len(row) != width:
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


_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                    type(None): "null"}


class FromJSONL(RecordSource):
    """Emit each line of a JSON-lines file as a dict, in order.

    A line is malformed when it is not valid JSON (or not UTF-8) or is valid
    JSON but not an object; ``on_error`` says what then happens. Blank lines
    are skipped silently.

    Example::

        src = flow.add(es.ops.FromJSONL("events.jsonl", on_error="dead_letter"), name="events")
        flow.connect(src.out(1), flow.add(es.ops.ToJSONL("rejected.jsonl")).in_(0))
    """

    def __init__(self, path: str | os.PathLike[str], *, on_error: str | ErrorPolicy = "fail"):
        super().__init__(path, on_error)
        self._file: Any = None
        self._line = 0

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._line = 0
        # Binary lines, decoded one by one: an undecodable byte then belongs to
        # exactly one line instead of failing a whole 8 KiB text chunk.
        self._file = open(self.path, "rb")

    def _read(self, out: list, max_items: int) -> None:
        lines = list(islice(self._file, max_items))
        loads = json.loads
        for line in lines:
            self._line += 1
            if line.isspace():
                continue
            try:
                # Decode here rather than in json.loads, which guesses UTF-16/32
                # from the first bytes; JSON lines are UTF-8 (a BOM is tolerated).
                text = line.decode("utf-8-sig" if self._line == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                self._reject(self._line, f"not valid UTF-8: {exc.reason} at byte {exc.start + 1}",
                             _raw_bytes(line))
                continue
            try:
                value = loads(text)
            except json.JSONDecodeError as exc:
                self._reject(self._line, f"invalid JSON: {exc.msg} at column {exc.colno}", _raw_bytes(line))
                continue
            except (ValueError, RecursionError) as exc:
                self._reject(self._line, f"invalid JSON: {exc}", _raw_bytes(line))
                continue
            if type(value) is dict:
                out.append(value)
            else:
                kind = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
                self._reject(self._line, f"expected a JSON object, got {kind}", _raw_bytes(line))
        if len(lines) < max_items:
            self._eof()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _raw_bytes(line: bytes) -> str:
    return _strip_newline(line.decode("utf-8", "backslashreplace"))


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


def rows_of(batch: Any) -> list[dict[str, Any]]:
    """The rows of a pyarrow RecordBatch as dicts, equal to ``batch.to_pylist()`` but faster.

    Columns are converted one at a time (numbers through numpy, which is about
    ten times faster than pyarrow's per-value conversion), then one generated
    function per schema builds each row's dict with a literal, which is the
    cheapest way Python has to make a dict.
    """
    names = batch.schema.names
    if not names:
        return [{} for _ in range(batch.num_rows)]
    columns = [column_values(c) for c in batch.columns]
    return list(map(_row_maker(tuple(names)), *columns))


_ROW_MAKERS: dict[tuple[str, ...], Callable[..., dict[str, Any]]] = {}


def _row_maker(names: tuple[str, ...]) -> Callable[..., dict[str, Any]]:
    maker = _ROW_MAKERS.get(names)
    if maker is None:
        # Names enter the source text only through repr(), as string literals.
        args = ", ".join(f"a{i}" for i in range(len(names)))
        body = ", ".join(f"{name!r}: a{i}" for i, name in enumerate(names))
        maker = eval(f"lambda {args}: {{{body}}}")  # noqa: S307 - literal text built above
        if len(_ROW_MAKERS) < 64:  # a handful of schemas per process; no unbounded growth
            _ROW_MAKERS[names] = maker
    return maker


def column_values(array: Any) -> list[Any]:
    """A pyarrow Array as Python values, as ``array.to_pylist()`` gives them (None for nulls).

    Fixed-width numbers are read straight from the array's data buffer through
    numpy (the slots of nulls hold arbitrary bytes, replaced by None after).
    """
    import pyarrow as pa

    t = array.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        # Not t.to_pandas_dtype(): it imports pandas, half a second on the first batch.
        kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
        return _with_nulls(array, _data_buffer(array, f"<{kind}{t.bit_width // 8}"))
    if pa.types.is_decimal128(t) and t.precision <= 18:
        return _decimal_values(array, t.scale)
    return array.to_pylist()


def _data_buffer(array: Any, dtype: Any, width: int = 1) -> Any:
    """The array's values buffer as a numpy array (``width`` words per value), without copying."""
    import numpy as np

    buffer = array.buffers()[1]
    start = array.offset * width
    return np.frombuffer(buffer, dtype=dtype, count=start + len(array) * width)[start:]


def _decimal_values(array: Any, scale: int) -> list[Any]:
    """Decimals through their unscaled integers: about four times faster than ``to_pylist``."""
    import numpy as np
    from decimal import Decimal

    # A decimal128 is two little-endian int64 words; with precision <= 18 the
    # value fits the low word, which two's complement makes a signed int64.
    # Decimal.scaleb keeps every digit (the default context has 28), so values are exact.
    unscaled = _data_buffer(array, np.int64, width=2)[::2].tolist()
    exponent = -scale
    return _with_nulls(array, [Decimal(v).scaleb(exponent) for v in unscaled])


def _with_nulls(array: Any, values: Any) -> list[Any]:
    if not array.null_count:
        return values.tolist() if hasattr(values, "tolist") else values
    import numpy as np

    # The validity bitmap, unpacked by numpy (a boolean Array's to_numpy would import pandas).
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], dtype=np.uint8), bitorder="little")
    nulls = bits[array.offset:array.offset + len(array)] == 0
    boxed = values.astype(object) if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    boxed[nulls] = None
    return boxed.tolist()


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]
