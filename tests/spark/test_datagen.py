"""The Spark TPCx-BB generator: spec §2 schemas, §7 structures, §5 stream orders, determinism.

Structure is checked on the shared scale-0.01 data set with pandas; the
visit-level facts (4:1 visitor:buyer, anonymous half) on the generator's own
visit DataFrame, since visits are not written out.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from elastream.spark.datagen import FACT_DAYS, FIRST_FACT_DATE_SK, HOT_ITEMS, PAGE_TYPES, TpcxbbModel, TpcxbbSizes, \
    generate
from elastream.tpcxbb import io
from elastream.tpcxbb.schema import STREAM_ORDER, STREAMS, TABLES

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]

LAST_FACT_DATE_SK = 38_717  # 2006-01-02

# Spec §2, written out independently of elastream.tpcxbb.schema.
SPEC_TYPES = {
    "store_sales": {"ss_sold_date_sk": "int64", "ss_sold_time_sk": "int64", "ss_item_sk": "int64",
                    "ss_store_sk": "int64", "ss_ticket_number": "int64", "ss_net_paid": "decimal128(7, 2)",
                    "ss_customer_sk": "int64", "ss_cdemo_sk": "int64", "ss_hdemo_sk": "int64", "ss_addr_sk": "int64",
                    "ss_promo_sk": "int64", "ss_quantity": "int32", "ss_wholesale_cost": "decimal128(7, 2)",
                    "ss_list_price": "decimal128(7, 2)", "ss_sales_price": "decimal128(7, 2)",
                    "ss_ext_discount_amt": "decimal128(7, 2)", "ss_ext_sales_price": "decimal128(7, 2)",
                    "ss_ext_wholesale_cost": "decimal128(7, 2)", "ss_ext_list_price": "decimal128(7, 2)",
                    "ss_ext_tax": "decimal128(7, 2)", "ss_coupon_amt": "decimal128(7, 2)",
                    "ss_net_paid_inc_tax": "decimal128(7, 2)", "ss_net_profit": "decimal128(7, 2)"},
    "web_clickstreams": {"wcs_click_date_sk": "int64", "wcs_click_time_sk": "int64", "wcs_sales_sk": "int64",
                         "wcs_item_sk": "int64", "wcs_web_page_sk": "int64", "wcs_user_sk": "int64"},
    "item": {"i_item_sk": "int64", "i_category_id": "int32", "i_category": "string"},
    "web_page": {"wp_web_page_sk": "int64", "wp_type": "string"},
    "date_dim": {"d_date_sk": "int64", "d_date": "string"},
    "time_dim": {"t_time_sk": "int64", "t_time": "int32", "t_hour": "int32", "t_minute": "int32",
                 "t_second": "int32"},
    "customer": {"c_customer_sk": "int64"},
}


def _frame(data, name: str) -> pd.DataFrame:
    return io.read_table(data, name, tuple(TABLES.get(name, STREAMS.get(name)).names)).to_pandas()


def test_every_table_has_the_spec_columns_and_types(tpcxbb_data):
    import pyarrow.parquet as pq

    for name, columns in SPEC_TYPES.items():
        for file in io.dataset_files(tpcxbb_data, name):
            schema = pq.read_schema(file)
            got = {f.name: str(f.type) for f in schema}
            assert got == columns, f"{name} ({file.name})"
    web_clickstreams = set(SPEC_TYPES["web_clickstreams"])
    assert set(pq.read_schema(io.dataset_files(tpcxbb_data, "wcs_stream")[0]).names) == web_clickstreams
    assert pq.read_schema(io.dataset_files(tpcxbb_data, "ss_stream")[0]).field("ss_line_number").type == pa.int32()


def test_sizes_and_meta_follow_the_scale(tpcxbb_data):
    sizes = TpcxbbSizes.for_scale(0.01)
    meta = io.read_meta(tpcxbb_data)
    assert meta["scale"] == 0.01 and meta["seed"] == 11
    rows = meta["rows"]
    assert rows["item"] == sizes.items >= 10_004 and rows["store"] == sizes.stores >= 11
    assert rows["web_page"] == 60 and rows["time_dim"] == 86_400 and rows["date_dim"] == 109_574
    assert rows["store_sales"] == rows["ss_stream"] and rows["web_clickstreams"] == rows["wcs_stream"]
    assert 5.5 * sizes.tickets < rows["store_sales"] < 9.5 * sizes.tickets  # mean 7.5 lines a ticket
    assert 13 * sizes.visits < rows["web_clickstreams"] < 17.5 * sizes.visits  # about 15.2 clicks a visit (§7)


def test_k_scaling_at_sf1_and_sf10():
    one = TpcxbbSizes.for_scale(1)
    assert (one.tickets, one.visits, one.items, one.customers, one.stores, one.web_pages) == \
        (90_000, 450_000, 18_000, 100_000, 12, 60)
    assert one.customer_sd == 400 and one.item_sd == 60
    assert TpcxbbSizes.for_scale(10).tickets == pytest.approx(1.11e6, rel=0.01)  # §7 table
    assert TpcxbbSizes.for_scale(100).items == 180_000
    with pytest.raises(ValueError, match="positive"):
        TpcxbbSizes.for_scale(0)


def test_dimension_keys_and_dates(tpcxbb_data):
    items = _frame(tpcxbb_data, "item").set_index("i_item_sk")
    assert set(HOT_ITEMS) <= set(items.index)
    assert set(items.loc[[10000, 10001, 10002], "i_category_id"]) <= {1, 2, 3}  # §7: Q1 pairs among hot items
    assert items.loc[10001, "i_category_id"] in (2, 3) and items.loc[10003, "i_category_id"] not in (1, 2, 3)
    assert set(items["i_category_id"].dropna()) == set(range(1, 10))
    assert 10 in set(_frame(tpcxbb_data, "store")["s_store_sk"])
    dates = _frame(tpcxbb_data, "date_dim").set_index("d_date_sk")["d_date"]
    assert dates[0] == "1900-01-01" and dates[36_890] == "2001-01-01" and dates[37_134] == "2001-09-02"
    assert dates[37_499] == "2002-09-02" and dates[LAST_FACT_DATE_SK] == "2006-01-02"
    assert dates.index.max() == 109_573 and dates[109_573] == "2200-01-01"
    pages = _frame(tpcxbb_data, "web_page")["wp_type"].value_counts()
    assert set(pages.index) == set(PAGE_TYPES) and pages.max() - pages.min() <= 1  # 8 types, uniform


def test_tickets_share_store_date_and_time_and_have_1_to_14_lines(tpcxbb_data):
    lines = _frame(tpcxbb_data, "ss_stream")
    per_ticket = lines.groupby("ss_ticket_number", dropna=False)
    shared = per_ticket[["ss_store_sk", "ss_sold_date_sk", "ss_sold_time_sk", "ss_customer_sk"]].nunique(dropna=False)
    assert (shared == 1).all().all()
    counts = per_ticket.size()
    assert counts.min() == 1 and counts.max() == 14
    assert sorted(per_ticket["ss_line_number"].max()) == sorted(counts)  # lines 1..n
    assert lines["ss_sold_date_sk"].min() == FIRST_FACT_DATE_SK
    assert LAST_FACT_DATE_SK - 5 <= lines["ss_sold_date_sk"].max() <= LAST_FACT_DATE_SK
    # Dates grow with the ticket number (§7).
    by_ticket = per_ticket["ss_sold_date_sk"].first().sort_index()
    assert by_ticket.is_monotonic_increasing
    hot = lines["ss_item_sk"].isin(HOT_ITEMS).mean()
    assert 0.04 < hot < 0.07  # 5% drawn from the hot items, plus the uniform share
    assert (lines["ss_store_sk"] == 10).any()
    paid = lines["ss_ext_sales_price"] - lines["ss_coupon_amt"]
    assert (paid == lines["ss_net_paid"]).all()


def test_purchase_clicks_share_the_orders_time_date_user_and_sales_key(tpcxbb_data):
    clicks = _frame(tpcxbb_data, "web_clickstreams")
    purchases = clicks[clicks["wcs_sales_sk"].notna()]
    per_order = purchases.groupby("wcs_sales_sk")
    shared = per_order[["wcs_click_date_sk", "wcs_click_time_sk", "wcs_user_sk"]].nunique(dropna=False)
    assert (shared == 1).all().all()
    assert per_order.size().min() == 1 and per_order.size().max() == 14
    assert purchases["wcs_item_sk"].isin(HOT_ITEMS).mean() > 0.04
    assert 10001 in set(purchases["wcs_item_sk"])
    browse = clicks[clicks["wcs_sales_sk"].isna()]
    assert not browse["wcs_item_sk"].isin(HOT_ITEMS[1:]).mean() > 0.01  # browse items are uniform
    assert 0.08 < len(purchases) / len(clicks) < 0.12  # about 9.9% (§7)
    assert 0.38 < clicks["wcs_user_sk"].isna().mean() < 0.46  # about 42% (§7)
    days = clicks["wcs_click_date_sk"]
    assert days.min() == FIRST_FACT_DATE_SK and days.max() <= FIRST_FACT_DATE_SK + FACT_DAYS - 1


def test_visits_are_4_visitors_to_1_buyer_and_half_the_visitors_anonymous(spark):
    from pyspark.sql import functions as F

    model = TpcxbbModel(spark, TpcxbbSizes.for_scale(0.01), seed=11, null_chance=0.00025)
    visits = model.visits().toPandas()
    buyers = visits[visits["_buyer"]]
    assert len(visits) == 5 * len(buyers)
    assert (visits["_visit"] % 5 == 4).eq(visits["_buyer"]).all()  # deterministic chunks of 5
    visitors = visits[~visits["_buyer"]]
    assert abs(visitors["wcs_user_sk"].isna().mean() - 0.5) < 0.03
    assert buyers["wcs_user_sk"].notna().all()
    assert visitors["_browse"].between(11, 21).all() and buyers["_browse"].between(3, 6).all()
    assert buyers["_lines"].between(1, 14).all() and (visitors["_lines"] == 0).all()
    # Every visit expands into its browse clicks plus its purchase clicks.
    clicks = model.web_clickstreams().agg(F.count(F.lit(1))).first()[0]
    assert clicks == int(visits["_browse"].sum() + visits["_lines"].sum())


def _keys(frame: pd.DataFrame, columns: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Sort-key tuples with NULL as -1, below every key value (keys are >= 0): Spark's NULLS FIRST."""
    arrays = [frame[c].fillna(-1).astype("int64").tolist() for c in columns]
    return list(zip(*arrays))


@pytest.mark.parametrize("stream", ["ss_stream", "wcs_stream"])
def test_streams_are_sorted_by_the_total_order_of_section_5(tpcxbb_data, stream):
    frame = io.read_table(tpcxbb_data, stream, STREAM_ORDER[stream]).to_pandas()  # files in name order
    keys = _keys(frame, STREAM_ORDER[stream])
    assert len(keys) > 1000
    if stream == "wcs_stream":
        assert len(io.dataset_files(tpcxbb_data, stream)) == 4  # 68k clicks in files of 20k rows
    bad = next((i for i, (a, b) in enumerate(zip(keys, keys[1:])) if a > b), None)
    assert bad is None, f"{stream} out of order at row {bad}: {keys[bad]} > {keys[bad + 1]}"


def test_streams_hold_the_same_rows_as_their_tables(tpcxbb_data):
    for stream, table in (("wcs_stream", "web_clickstreams"), ("ss_stream", "store_sales")):
        columns = tuple(TABLES[table].names)
        a = io.read_table(tpcxbb_data, stream, columns).to_pandas()
        b = io.read_table(tpcxbb_data, table, columns).to_pandas()
        key = list(columns)
        pd.testing.assert_frame_equal(a.sort_values(key).reset_index(drop=True),
                                      b.sort_values(key).reset_index(drop=True))


def test_same_seed_same_rows_other_seed_other_rows(spark, tmp_path):
    outputs = ("store_sales", "web_clickstreams", "item", "wcs_stream")
    runs = {}
    for label, seed in (("a", 5), ("b", 5), ("c", 6)):
        generate(tmp_path / label, 0.002, seed, spark=spark, outputs=outputs)
        runs[label] = {name: io.read_table(tmp_path / label, name, tuple(TABLES.get(name, STREAMS.get(name)).names))
                       for name in outputs}
    for name in outputs:
        a, b = runs["a"][name], runs["b"][name]
        if name.endswith("_stream"):
            assert a.equals(b), name  # same rows in the same order
        else:
            key = [(c, "ascending") for c in a.column_names]
            assert a.sort_by(key).equals(b.sort_by(key)), name
    assert not runs["a"]["store_sales"].equals(runs["c"]["store_sales"])
    assert json.loads((tmp_path / "a" / "_tpcxbb.json").read_text())["rows"] == \
        json.loads((tmp_path / "b" / "_tpcxbb.json").read_text())["rows"]
