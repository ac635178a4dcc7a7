"""Reading the TPCx-BB Parquet data: malformed input names table, column and file; the engine registry.

No Spark here: validation reads Parquet footers with pyarrow.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elastream.cli.main import main
from elastream.tpcxbb import engines, io
from elastream.tpcxbb.io import TpcxbbDataError

pytestmark = pytest.mark.timeout(30)

ITEM = pa.schema([("i_item_sk", pa.int64()), ("i_category_id", pa.int32())])


def _write(root: Path, name: str, table: pa.Table, file: str = "part-00000.parquet") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / file)
    return folder / file


def test_read_table_concatenates_files_in_name_order_with_the_spec_types(tmp_path):
    _write(tmp_path, "item", pa.table({"i_item_sk": pa.array([3, 4], pa.int32()),
                                       "i_category_id": pa.array([1, 2], pa.int8())}),
           "part-00001.parquet")
    _write(tmp_path, "item", pa.table({"i_item_sk": [1, 2], "i_category_id": pa.array([5, 6], pa.int32())}))
    (tmp_path / "item" / "_SUCCESS").write_text("")
    table = io.read_table(tmp_path, "item")
    assert table.schema == ITEM  # int32 widened to the spec's bigint
    assert table.column("i_item_sk").to_pylist() == [1, 2, 3, 4]
    assert io.row_count(tmp_path, "item") == 4
    batches = list(io.iter_batches(tmp_path, "item", batch_size=1))
    assert [b.num_rows for b in batches] == [1, 1, 1, 1] and batches[0].schema == ITEM


def test_a_single_file_table_is_found(tmp_path):
    pq.write_table(pa.table({"wp_web_page_sk": [1], "wp_type": ["order"]}), tmp_path / "web_page.parquet")
    assert io.read_table(tmp_path, "web_page").to_pylist() == [{"wp_web_page_sk": 1, "wp_type": "order"}]


def test_a_missing_table_names_the_table_and_the_paths_tried(tmp_path):
    with pytest.raises(TpcxbbDataError) as info:
        io.read_table(tmp_path, "store_sales")
    assert info.value.table == "store_sales" and info.value.column is None
    assert "store_sales" in str(info.value) and "datagen" in str(info.value)
    (tmp_path / "item").mkdir()
    with pytest.raises(TpcxbbDataError, match="holds no Parquet files"):
        io.validate(tmp_path, "item")


def test_a_missing_column_names_table_column_and_file(tmp_path):
    path = _write(tmp_path, "item", pa.table({"i_item_sk": [1]}))
    with pytest.raises(TpcxbbDataError) as info:
        io.read_table(tmp_path, "item")
    err = info.value
    assert (err.table, err.column, err.file) == ("item", "i_category_id", str(path))
    assert "'item'" in str(err) and "'i_category_id'" in str(err) and str(path) in str(err) and "missing" in str(err)


def test_a_wrong_type_names_table_column_file_and_both_types(tmp_path):
    _write(tmp_path, "item", pa.table({"i_item_sk": [1], "i_category_id": pa.array([1], pa.int32())}))
    bad = _write(tmp_path, "item", pa.table({"i_item_sk": ["1"], "i_category_id": pa.array([1], pa.int32())}),
                 "part-00001.parquet")
    with pytest.raises(TpcxbbDataError) as info:
        io.validate(tmp_path, "item")
    err = info.value
    assert (err.table, err.column, err.file) == ("item", "i_item_sk", str(bad))
    assert "type string" in str(err) and "expected int64" in str(err)
    _write(tmp_path, "store_sales", pa.table({c: [1] for c in ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk",
                                                               "ss_store_sk", "ss_ticket_number")}
                                             | {"ss_net_paid": [1.5]}))
    with pytest.raises(TpcxbbDataError, match="'ss_net_paid' has type double .*expected decimal128\\(7, 2\\)"):
        io.validate(tmp_path, "store_sales")


def test_an_unreadable_file_names_table_and_file(tmp_path):
    _write(tmp_path, "item", pa.table({"i_item_sk": [1], "i_category_id": pa.array([1], pa.int32())}))
    broken = tmp_path / "item" / "part-00001.parquet"
    broken.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TpcxbbDataError) as info:
        io.read_table(tmp_path, "item")
    assert (info.value.table, info.value.file) == ("item", str(broken))
    assert "cannot read Parquet file" in str(info.value)


def test_type_compatibility_rules():
    assert io.is_compatible(pa.int32(), pa.int64()) and io.is_compatible(pa.null(), pa.int64())
    assert io.is_compatible(pa.large_string(), pa.string())
    assert io.is_compatible(pa.decimal128(5, 2), pa.decimal128(7, 2))
    assert not io.is_compatible(pa.int64(), pa.int32())
    assert not io.is_compatible(pa.decimal128(7, 3), pa.decimal128(7, 2))
    assert not io.is_compatible(pa.float64(), pa.int64())


def test_engine_registry_lists_spark_batch_and_refuses_unknown_engines():
    assert "spark-batch" in engines.available_engines()
    with pytest.raises(KeyError, match="unknown engine 'nope'; available: spark-batch"):
        engines.engine_entry("nope")
    with pytest.raises(ValueError, match="module:function"):
        engines.register_engine("bad", "no_colon_here")


def test_query_cli_refuses_an_unknown_engine_and_a_missing_folder(tmp_path, capsys):
    assert main(["query", "q02", "--data", str(tmp_path), "--engine", "nope"]) == 2
    assert "unknown engine 'nope'" in capsys.readouterr().err
    assert main(["query", "q02", "--data", str(tmp_path / "absent")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["query", "q15", "--data", str(tmp_path), "--start-date", "2002-13-01"]) == 2
    assert "Q15Params.start_date" in capsys.readouterr().err
