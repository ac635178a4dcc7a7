"""Locate, validate and read the generated TPCx-BB Parquet tables and streams.

A data directory holds one entry per table or stream (spec §2, §5): either a
folder ``DIR/<name>/`` of Parquet part files (what Spark writes; files whose
name starts with ``_`` or ``.`` are ignored) or a single file
``DIR/<name>.parquet``. Part files are read in name order; for the streams
that order is the stream order (Spark names range-partitioned output
``part-00000…``, ``part-00001…``).

Before anything is read, :func:`validate` opens every file's Parquet footer
and checks the columns the queries use (:data:`~elastream.tpcxbb.schema.USED_COLUMNS`)
against the spec §2 types. A missing table, an unreadable file, a missing
column or a wrong type raises :class:`TpcxbbDataError` naming the table, the
column and the file, so a bad data set fails before any engine starts.

Plain functions over the file system; call them from any thread.

Example::

    table = read_table("/data/sf0.01", "item")            # pyarrow.Table, validated
    for batch in iter_batches("/data/sf0.01", "wcs_stream"):  # in stream order
        ...
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from elastream.errors import ElastreamError
from elastream.tpcxbb.schema import USED_COLUMNS, schema_of

META_FILE = "_tpcxbb.json"  # written by the generator next to the tables


class TpcxbbDataError(ElastreamError):
    """A TPCx-BB input table is missing, unreadable or malformed.

    ``table``, ``column`` and ``file`` name what is wrong (``column`` is
    ``None`` when the whole file or table is at fault).
    """

    def __init__(self, message: str, *, table: str, column: str | None = None, file: str | None = None):
        super().__init__(message)
        self.table = table
        self.column = column
        self.file = file


def dataset_files(data_dir: str | Path, name: str) -> list[Path]:
    """The Parquet files of table or stream ``name`` under ``data_dir``, in read order.

    Raises :class:`TpcxbbDataError` when neither ``DIR/name/`` with part files
    nor ``DIR/name.parquet`` exists.
    """
    root = Path(data_dir)
    folder, single = root / name, root / f"{name}.parquet"
    if folder.is_dir():
        files = sorted(p for p in folder.iterdir()
                       if p.is_file() and not p.name.startswith(("_", ".")) and p.suffix != ".crc")
        if not files:
            raise TpcxbbDataError(f"table {name!r}: folder {folder} holds no Parquet files", table=name,
                                  file=str(folder))
        return files
    if single.is_file():
        return [single]
    raise TpcxbbDataError(f"table {name!r} not found: neither {folder}/ nor {single} exists "
                          f"(generate data with `elastream datagen tpcxbb --out {root}`)", table=name,
                          file=str(folder))


def is_compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a file column of type ``actual`` can be read as the spec type ``expected``.

    Exact matches, narrower integers, ``large_string`` for ``string``, an
    all-NULL column, and a decimal of the same scale and no more precision.

    Example: ``is_compatible(pa.int32(), pa.int64()) and not is_compatible(pa.string(), pa.int64())``
    """
    if actual == expected or pa.types.is_null(actual):
        return True
    if pa.types.is_integer(expected) and pa.types.is_integer(actual):
        return actual.bit_width <= expected.bit_width
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    if pa.types.is_decimal(expected) and pa.types.is_decimal(actual):
        return actual.scale == expected.scale and actual.precision <= expected.precision
    return False


def _file_schema(name: str, file: Path) -> pa.Schema:
    try:
        return pq.read_schema(file)
    except (OSError, pa.ArrowException) as exc:
        raise TpcxbbDataError(f"table {name!r}: cannot read Parquet file {file}: {exc}", table=name,
                              file=str(file)) from exc


def validate(data_dir: str | Path, name: str, columns: Sequence[str] | None = None) -> list[Path]:
    """Check every file of ``name`` for ``columns`` (default: the used ones) and their types; return the files.

    Raises :class:`TpcxbbDataError` for the first problem found.
    """
    expected = schema_of(name)
    wanted = tuple(columns) if columns is not None else USED_COLUMNS[name]
    files = dataset_files(data_dir, name)
    for file in files:
        schema = _file_schema(name, file)
        for column in wanted:
            want = expected.field(column).type
            index = schema.get_field_index(column)
            if index < 0:
                raise TpcxbbDataError(f"table {name!r}: column {column!r} ({want}) is missing from file {file}",
                                      table=name, column=column, file=str(file))
            got = schema.field(index).type
            if not is_compatible(got, want):
                raise TpcxbbDataError(f"table {name!r}: column {column!r} has type {got} in file {file}, "
                                      f"expected {want}", table=name, column=column, file=str(file))
    return files


def _read_file(name: str, file: Path, columns: Sequence[str], target: pa.Schema) -> pa.Table:
    try:
        table = pq.read_table(file, columns=list(columns))
        return table.cast(target)
    except (OSError, pa.ArrowException) as exc:
        raise TpcxbbDataError(f"table {name!r}: cannot read Parquet file {file}: {exc}", table=name,
                              file=str(file)) from exc


def read_table(data_dir: str | Path, name: str, columns: Sequence[str] | None = None) -> pa.Table:
    """Table or stream ``name`` as one pyarrow Table with the spec types, files concatenated in order.

    ``columns`` defaults to the columns the queries use (:data:`USED_COLUMNS`).
    """
    wanted = tuple(columns) if columns is not None else USED_COLUMNS[name]
    files = validate(data_dir, name, wanted)
    target = pa.schema([schema_of(name).field(c) for c in wanted])
    return pa.concat_tables([_read_file(name, f, wanted, target) for f in files])


def iter_batches(data_dir: str | Path, name: str, columns: Sequence[str] | None = None,
                 batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
    """Record batches of ``name`` in file order (stream order for the streams), with the spec types.

    Validates every file first, so a malformed file fails before the first batch.
    """
    wanted = tuple(columns) if columns is not None else USED_COLUMNS[name]
    files = validate(data_dir, name, wanted)
    target = pa.schema([schema_of(name).field(c) for c in wanted])
    for file in files:
        try:
            reader = pq.ParquetFile(file)
            for batch in reader.iter_batches(batch_size=batch_size, columns=list(wanted)):
                yield from pa.Table.from_batches([batch], schema=batch.schema).cast(target).to_batches()
        except (OSError, pa.ArrowException) as exc:
            raise TpcxbbDataError(f"table {name!r}: cannot read Parquet file {file}: {exc}", table=name,
                                  file=str(file)) from exc


def read_meta(data_dir: str | Path) -> dict[str, Any] | None:
    """The generator's description of a data set (scale, seed, row counts), or ``None`` if absent."""
    path = Path(data_dir) / META_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def row_count(data_dir: str | Path, name: str) -> int:
    """Rows of table or stream ``name``, from the Parquet footers (no data is read)."""
    total = 0
    for file in dataset_files(data_dir, name):
        try:
            total += pq.ParquetFile(file).metadata.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise TpcxbbDataError(f"table {name!r}: cannot read Parquet file {file}: {exc}", table=name,
                                  file=str(file)) from exc
    return total
