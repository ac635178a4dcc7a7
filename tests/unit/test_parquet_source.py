"""FromParquet over several files: folder and list order, footer checks first, errors naming the file.

Single-file behaviour (round trips, column selection, the basic errors) is in
tests/unit/test_file_ops.py.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.ops.file_sources import rows_of

pytestmark = pytest.mark.timeout(60)


def run(source: es.Operator, threads: int = 1) -> list:
    flow = es.Flow("parquet")
    flow.add(source, name="src") >> flow.add(es.ops.Collect(), name="out")
    return es.Runner(threads=threads, batch_size=100).run(flow, timeout=30).outputs["out"]


def write_parts(folder: Path, sizes: list[int], row_group_size: int = 300) -> list[dict]:
    """Spark-like part files of consecutive ids (plus the files Spark writes beside them)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, start = [], 0
    for i, n in enumerate(sizes):
        part = [{"id": start + k, "part": i} for k in range(n)]
        pq.write_table(pa.Table.from_pylist(part), folder / f"part-{i:05d}-abc.snappy.parquet",
                       row_group_size=row_group_size)
        rows += part
        start += n
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-00000-abc.snappy.parquet.crc").write_bytes(b"\x00crc")
    return rows


@pytest.mark.parametrize("threads", [1, 2])
def test_a_folder_is_read_in_name_order_skipping_spark_side_files(tmp_path: Path, threads: int):
    # Written out of name order: the file system's listing order must not matter.
    folder = tmp_path / "stream"
    rows = write_parts(folder, [700, 0, 1234, 5])
    (folder / "part-00001-abc.snappy.parquet").unlink()  # a gap in the numbering is fine
    rows = [r for r in rows if r["part"] != 1]
    assert run(es.ops.FromParquet(folder), threads) == rows


def test_a_list_is_read_in_the_given_order(tmp_path: Path):
    rows = write_parts(tmp_path / "s", [300, 400])
    files = sorted((tmp_path / "s").glob("part-*.parquet"))
    out = run(es.ops.FromParquet([files[1], files[0]], columns=["id"]))
    assert out == [{"id": r["id"]} for r in rows[300:] + rows[:300]]


def test_an_unreadable_file_fails_before_any_row_naming_it(tmp_path: Path):
    folder = tmp_path / "s"
    write_parts(folder, [500, 500])
    bad = folder / "part-00002-abc.snappy.parquet"
    bad.write_text("not parquet")
    source = es.ops.FromParquet(folder)
    with pytest.raises(es.OperatorError, match=r"cannot read '.*part-00002-abc\.snappy\.parquet' as Parquet"):
        run(source)


def test_a_file_without_a_selected_column_is_named(tmp_path: Path):
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"x": [1], "y": [2]}), first)
    pq.write_table(pa.table({"x": [3]}), second)
    with pytest.raises(es.OperatorError, match=r"b\.parquet' has no column\(s\) \['y'\]"):
        run(es.ops.FromParquet([first, second], columns=["x", "y"]))


def test_a_missing_file_of_a_list_and_an_empty_folder_are_named(tmp_path: Path):
    good = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": [1]}), good)
    with pytest.raises(es.OperatorError, match="gone.parquet") as info:
        run(es.ops.FromParquet([good, tmp_path / "gone.parquet"]))
    assert isinstance(info.value.__cause__, FileNotFoundError)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(es.OperatorError, match="holds no Parquet files"):
        run(es.ops.FromParquet(tmp_path / "empty"))
    with pytest.raises(ValueError, match="empty"):
        es.ops.FromParquet([])


def test_a_file_corrupt_after_its_footer_is_named_when_read(tmp_path: Path):
    path = tmp_path / "torn.parquet"
    pq.write_table(pa.table({"x": list(range(10_000))}), path, compression="snappy", row_group_size=2_000)
    raw = bytearray(path.read_bytes())
    for i in range(100, 3_000):  # scribble over the first data pages, keep the footer
        raw[i] = 0xAB
    path.write_bytes(bytes(raw))
    with pytest.raises(es.OperatorError, match=r"torn\.parquet"):
        run(es.ops.FromParquet(path))


def test_rows_equal_pyarrow_to_pylist_for_every_column_kind():
    n = 50
    batch = pa.record_batch({
        "i64": pa.array([None if k % 7 == 0 else k * 10**12 - 5 for k in range(n)], pa.int64()),
        "i32": pa.array(range(n), pa.int32()),
        "u8": pa.array([k % 256 for k in range(n)], pa.uint8()),
        "f": pa.array([None if k % 5 == 0 else k / 3 for k in range(n)]),
        "flag": pa.array([None if k % 4 == 0 else k % 2 == 0 for k in range(n)]),
        "money": pa.array([None if k % 6 == 0 else Decimal(k * 1001 - 20_000).scaleb(-2) for k in range(n)],
                          pa.decimal128(7, 2)),
        "wide": pa.array([Decimal(10**30 + k) for k in range(n)], pa.decimal128(38, 0)),
        "s": pa.array([None if k % 3 == 0 else f"s{k}" for k in range(n)]),
        "day": pa.array([dt.date(2001, 1, 1) + dt.timedelta(days=k) for k in range(n)]),
        "nulls": pa.nulls(n),
    })
    for piece in (batch, batch.slice(3, 20)):
        expected = piece.to_pylist()
        got = rows_of(piece)
        assert got == expected
        assert [repr(r) for r in got] == [repr(r) for r in expected]  # same types and decimal exponents
