"""Table schemas (spec §2), stream orders (§5), answer columns (§4) and answer comparison (§6)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from elastream.tpcxbb.answers import answer_difference, answer_schema
from elastream.tpcxbb.schema import QUERY_STREAM, QUERY_TABLES, STREAM_ORDER, STREAMS, TABLES, USED_COLUMNS, \
    schema_of, spark_type_name, used_schema

pytestmark = pytest.mark.timeout(30)


def test_the_used_columns_have_the_kits_types():
    assert used_schema("store_sales") == pa.schema([
        ("ss_sold_date_sk", pa.int64()), ("ss_sold_time_sk", pa.int64()), ("ss_item_sk", pa.int64()),
        ("ss_store_sk", pa.int64()), ("ss_ticket_number", pa.int64()), ("ss_net_paid", pa.decimal128(7, 2))])
    assert TABLES["web_clickstreams"] == pa.schema([
        ("wcs_click_date_sk", pa.int64()), ("wcs_click_time_sk", pa.int64()), ("wcs_sales_sk", pa.int64()),
        ("wcs_item_sk", pa.int64()), ("wcs_web_page_sk", pa.int64()), ("wcs_user_sk", pa.int64())])
    assert used_schema("item") == pa.schema([("i_item_sk", pa.int64()), ("i_category_id", pa.int32())])
    assert TABLES["item"].field("i_category").type == pa.string()
    assert used_schema("web_page") == pa.schema([("wp_web_page_sk", pa.int64()), ("wp_type", pa.string())])
    assert used_schema("date_dim") == pa.schema([("d_date_sk", pa.int64()), ("d_date", pa.string())])
    assert len(TABLES["store_sales"]) == 23  # 10 keys, quantity, 12 money columns (§2)
    assert TABLES["store_sales"].field("ss_quantity").type == pa.int32()


def test_streams_extend_their_tables_and_name_a_total_order():
    assert STREAMS["wcs_stream"] == TABLES["web_clickstreams"]
    assert STREAMS["ss_stream"].names == [*TABLES["store_sales"].names, "ss_line_number"]
    assert STREAM_ORDER["wcs_stream"] == ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_user_sk", "wcs_sales_sk",
                                          "wcs_item_sk", "wcs_web_page_sk")
    assert STREAM_ORDER["ss_stream"][-2:] == ("ss_ticket_number", "ss_line_number")
    for name, columns in USED_COLUMNS.items():
        assert set(columns) <= set(schema_of(name).names)
    assert set(QUERY_TABLES) == set(QUERY_STREAM) == {"q01", "q02", "q03", "q04", "q15"}
    with pytest.raises(KeyError, match="unknown TPCx-BB table"):
        schema_of("web_sales")


def test_spark_type_names():
    assert [spark_type_name(t) for t in (pa.int64(), pa.int32(), pa.string(), pa.decimal128(7, 2))] == \
        ["bigint", "int", "string", "decimal(7,2)"]
    with pytest.raises(TypeError):
        spark_type_name(pa.date32())


def test_answer_columns_of_section_4():
    assert answer_schema("q01").names == ["item_sk_1", "item_sk_2", "cnt"]
    assert answer_schema("q01", windowed=True).names == ["window_start", "item_sk_1", "item_sk_2", "cnt"]
    assert answer_schema("q02").names == ["item_sk_1", "item_sk_2", "cnt"]
    assert answer_schema("q03").names == ["purchased_item", "lastviewed_item", "cnt"]
    assert answer_schema("q04").names == ["avg_pages"]
    assert answer_schema("q15") == pa.schema([("cat", pa.int32()), ("slope", pa.float64()),
                                              ("intercept", pa.float64())])


def test_answers_compare_exactly_or_after_the_spec_rounding():
    q2 = pa.table({"item_sk_1": [5, 7], "item_sk_2": [10001, 10001], "cnt": [2, 1]})
    assert answer_difference("q02", q2, q2) is None
    swapped = pa.table({"item_sk_1": [7, 5], "item_sk_2": [10001, 10001], "cnt": [2, 1]})
    assert "row 0 column 'item_sk_1'" in answer_difference("q02", q2, swapped)
    assert "rows expected" in answer_difference("q02", q2, q2.slice(0, 1))
    q4 = pa.table({"avg_pages": [2.2400000001]})
    assert answer_difference("q04", q4, pa.table({"avg_pages": [2.24]})) is None
    assert answer_difference("q04", q4, pa.table({"avg_pages": [2.5]})) is not None
    q15 = pa.table({"cat": pa.array([3], pa.int32()), "slope": [-4.28411771234], "intercept": [174246.90597631]})
    near = pa.table({"cat": pa.array([3], pa.int32()), "slope": [-4.28411771239], "intercept": [174246.90597632]})
    assert answer_difference("q15", q15, near) is None
    far = pa.table({"cat": pa.array([3], pa.int32()), "slope": [-4.2841], "intercept": [174246.90597632]})
    assert "slope" in answer_difference("q15", q15, far)
