"""Batch reference answers of TPCx-BB Q1, Q2, Q3, Q4 and Q15 with Spark DataFrames (spec §4, §6).

One function per query builds a DataFrame from validated tables
(:class:`~elastream.spark.tables.SparkTables`) and a parameter object of
:mod:`elastream.tpcxbb.params`. The map-reduce scripts of the kit are replaced
by window functions, as §6 suggests: sessions come from a lag of the event
time per user and a running sum of "gap > timeout" flags (:func:`sessionize`);
Q3's last-N clicks are lags over the per-user order (tstamp, sales key NULLS
FIRST, item). Outputs have the columns and order of §4
(:func:`~elastream.tpcxbb.answers.answer_schema`), unrounded (§6).

:func:`run_batch_query` runs one query and returns a ``pyarrow.Table``; it is
what the CLI, the demo and the tests call. Runs on the caller's thread.

Example::

    table = run_batch_query("q02", "/tmp/tpcxbb-sf0.01")           # spec §3 defaults
    table = run_batch_query("q01", data, Q01Params(window_s=3600))  # hourly, §5
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from elastream.spark.tables import SparkTables
from elastream.tpcxbb import io
from elastream.tpcxbb.answers import answer_schema
from elastream.tpcxbb.engines import QueryRun, add_argument_once
from elastream.tpcxbb.params import Q01Params, Q02Params, Q03Params, Q04Params, Q15Params, default_params, \
    params_class
from elastream.tpcxbb.schema import QUERY_TABLES, SECONDS_PER_DAY

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession


ENGINE = "spark-batch"


def _F() -> Any:
    from pyspark.sql import functions as F

    return F


def tstamp(date_sk: str, time_sk: str) -> Column:
    """Event time in seconds: ``date_sk * 86400 + time_sk`` (§1)."""
    F = _F()
    return F.col(date_sk) * F.lit(SECONDS_PER_DAY) + F.col(time_sk)


def sessionize(frame: DataFrame, user: str, ts: str, timeout_s: int) -> DataFrame:
    """Add ``session``: per ``user``, a new session when the gap to the previous click exceeds ``timeout_s``.

    A gap of exactly ``timeout_s`` stays in the session; the first click opens
    session 1 (§4 Q2 "Sessionization"). Clicks with equal ``ts`` always share a
    session, so their relative order does not matter.
    """
    from pyspark.sql import Window

    F = _F()
    by_time = Window.partitionBy(user).orderBy(ts)
    previous = F.lag(ts).over(by_time)
    opens = F.when(previous.isNull() | ((F.col(ts) - previous) > timeout_s), 1).otherwise(0)
    running = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return frame.withColumn("_opens", opens).withColumn("session", F.sum("_opens").over(running)).drop("_opens")


def q01(t: SparkTables, p: Q01Params) -> DataFrame:
    """Q1: item pairs sold together in more than ``viewed_together_count`` tickets (§4 Q1; windowed: §5 Q1)."""
    from pyspark.sql import Window

    F = _F()
    items = t["item"].where(F.col("i_category_id").isin(*p.categories)).select("i_item_sk")
    lines = t["store_sales"].where(F.col("ss_store_sk").isin(*p.stores)) \
        .join(items, F.col("ss_item_sk") == F.col("i_item_sk"))
    window = (F.floor(tstamp("ss_sold_date_sk", "ss_sold_time_sk") / p.window_s) * p.window_s
              if p.window_s else F.lit(0)).cast("long")
    # A basket is the set of distinct items of a ticket (duplicates removed).
    baskets = lines.select(F.col("ss_ticket_number").alias("ticket"), window.alias("window_start"),
                           F.col("ss_item_sk").alias("item")).distinct()
    a, b = baskets.alias("a"), baskets.alias("b")
    pairs = a.join(b, (F.col("a.ticket") == F.col("b.ticket")) & (F.col("a.window_start") == F.col("b.window_start"))
                   & (F.col("a.item") < F.col("b.item")))
    counts = pairs.groupBy(F.col("a.window_start").alias("window_start"), F.col("a.item").alias("item_sk_1"),
                           F.col("b.item").alias("item_sk_2")).agg(F.count(F.lit(1)).alias("cnt")) \
        .where(F.col("cnt") > p.viewed_together_count)
    order = [F.col("cnt").desc(), F.col("item_sk_1").asc(), F.col("item_sk_2").asc()]
    if not p.window_s:
        return counts.orderBy(*order).limit(p.limit).select("item_sk_1", "item_sk_2", "cnt")
    rank = F.row_number().over(Window.partitionBy("window_start").orderBy(*order))
    return counts.withColumn("_rank", rank).where(F.col("_rank") <= p.limit) \
        .orderBy(F.col("window_start").asc(), *order).select("window_start", "item_sk_1", "item_sk_2", "cnt")


def q02(t: SparkTables, p: Q02Params) -> DataFrame:
    """Q2: items viewed in the same session as ``item_sk``, by number of sessions (§4 Q2)."""
    F = _F()
    clicks = t["web_clickstreams"].where(F.col("wcs_item_sk").isNotNull() & F.col("wcs_user_sk").isNotNull()) \
        .select(F.col("wcs_user_sk").alias("user"), F.col("wcs_item_sk").alias("item"),
                tstamp("wcs_click_date_sk", "wcs_click_time_sk").alias("ts"))
    # One item set per session (each item counts once); keep the sets holding the product (§4 Q2).
    sessions = sessionize(clicks, "user", "ts", p.session_timeout_s).groupBy("user", "session") \
        .agg(F.collect_set("item").alias("items"))
    together = sessions.where(F.array_contains("items", p.item_sk)).select(F.explode("items").alias("item")) \
        .where(F.col("item") != p.item_sk)
    return together.groupBy(F.col("item").alias("item_sk_1")).agg(F.count(F.lit(1)).alias("cnt")) \
        .select("item_sk_1", F.lit(p.item_sk).cast("long").alias("item_sk_2"), "cnt") \
        .orderBy(F.col("cnt").desc(), F.col("item_sk_1").asc()).limit(p.limit)


def q03(t: SparkTables, p: Q03Params) -> DataFrame:
    """Q3: items among a user's last N clicks within the look-back before a purchase of the item (§4 Q3)."""
    from pyspark.sql import Window

    F = _F()
    clicks = t["web_clickstreams"].where(F.col("wcs_user_sk").isNotNull() & F.col("wcs_item_sk").isNotNull()) \
        .select(F.col("wcs_user_sk").alias("user"), F.col("wcs_item_sk").alias("item"),
                F.col("wcs_sales_sk").alias("sales"), tstamp("wcs_click_date_sk", "wcs_click_time_sk").alias("ts"))
    # The per-user order that decides the answer: tstamp, sales key NULLS FIRST, item (§4 Q3, §6).
    history = Window.partitionBy("user").orderBy(F.col("ts").asc(), F.col("sales").asc_nulls_first(),
                                                 F.col("item").asc())
    previous = F.array(*[F.struct(F.lag("item", k).over(history).alias("item"), F.lag("ts", k).over(history)
                                  .alias("ts")) for k in range(1, p.views_before_purchase + 1)])
    purchases = clicks.withColumn("_previous", previous) \
        .where(F.col("item").isin(*p.purchased_items) & F.col("sales").isNotNull())
    viewed = purchases.select(F.col("item").alias("purchased_item"), F.col("ts"),
                              F.explode("_previous").alias("_v")) \
        .where(F.col("_v.ts") >= F.col("ts") - p.days_in_sec_before_purchase) \
        .select("purchased_item", F.col("_v.item").alias("lastviewed_item"))
    categories = t["item"].where(F.col("i_category_id").isin(*p.categories)).select("i_item_sk")
    return viewed.join(categories, F.col("lastviewed_item") == F.col("i_item_sk"), "left_semi") \
        .groupBy("purchased_item", "lastviewed_item").agg(F.count(F.lit(1)).alias("cnt")) \
        .orderBy(F.col("cnt").desc(), F.col("purchased_item").asc(), F.col("lastviewed_item").asc()).limit(p.limit)


def q04(t: SparkTables, p: Q04Params) -> DataFrame:
    """Q4: mean clicks of sessions with an add-to-cart and no later checkout (§4 Q4, order-free rule)."""
    F = _F()
    pages = t["web_page"].select("wp_web_page_sk", "wp_type")
    clicks = t["web_clickstreams"].where(F.col("wcs_web_page_sk").isNotNull() & F.col("wcs_user_sk").isNotNull()
                                         & F.col("wcs_sales_sk").isNull()) \
        .join(pages, F.col("wcs_web_page_sk") == F.col("wp_web_page_sk")) \
        .select(F.col("wcs_user_sk").alias("user"), tstamp("wcs_click_date_sk", "wcs_click_time_sk").alias("ts"),
                "wp_type")
    sessions = sessionize(clicks, "user", "ts", p.session_timeout_s).groupBy("user", "session").agg(
        F.count(F.lit(1)).alias("pages"),
        F.max(F.when(F.col("wp_type") == p.cart_page_type, F.col("ts"))).alias("cart"),
        F.max(F.when(F.col("wp_type") == p.checkout_page_type, F.col("ts"))).alias("checkout"))
    # Same second: the checkout wins (§4 Q4), hence the strict comparison.
    abandoned = sessions.where(F.col("cart").isNotNull()
                               & (F.col("checkout").isNull() | (F.col("cart") > F.col("checkout"))))
    total = abandoned.agg(F.sum("pages").alias("pages"), F.count(F.lit(1)).alias("sessions"))
    return total.select(F.when(F.col("sessions") > 0, F.col("pages").cast("double") / F.col("sessions"))
                        .cast("double").alias("avg_pages"))


def q15(t: SparkTables, p: Q15Params) -> DataFrame:
    """Q15: categories whose daily store sales have a least-squares slope ≤ 0 (§4 Q15).

    The sums n, Σx, Σx², Σy, Σxy are exact (bigint and decimal), then slope and
    intercept are computed once in float64, so the answer does not depend on
    Spark's partitioning.
    """
    F = _F()
    days = t["date_dim"].where(F.col("d_date").between(p.start_date, p.end_date)).select("d_date_sk")
    sales = t["store_sales"].where(F.col("ss_store_sk") == p.store_sk) \
        .join(days, F.col("ss_sold_date_sk") == F.col("d_date_sk"), "left_semi")
    items = t["item"].where(F.col("i_category_id").isNotNull()).select("i_item_sk", "i_category_id")
    daily = sales.join(items, F.col("ss_item_sk") == F.col("i_item_sk")) \
        .groupBy(F.col("i_category_id").alias("cat"), F.col("ss_sold_date_sk").alias("x")) \
        .agg(F.sum("ss_net_paid").alias("y"))  # days without sales have no point (§4 Q15)
    sums = daily.groupBy("cat").agg(
        F.count(F.lit(1)).alias("n"), F.sum("x").alias("sx"), F.sum(F.col("x") * F.col("x")).alias("sxx"),
        F.sum("y").alias("sy"), F.sum(F.col("x").cast("decimal(20,0)") * F.col("y")).alias("sxy"))
    numerator = (F.col("n") * F.col("sxy") - F.col("sx") * F.col("sy")).cast("double")
    denominator = (F.col("n") * F.col("sxx") - F.col("sx") * F.col("sx")).cast("double")
    slope = F.when(denominator != 0, numerator / denominator)  # one point: no slope (NULL, as in Hive)
    fitted = sums.withColumn("slope", slope).withColumn(
        "intercept", (F.col("sy").cast("double") - F.col("slope") * F.col("sx").cast("double")) / F.col("n"))
    return fitted.where(F.col("slope") <= 0).orderBy("cat") \
        .select(F.col("cat").cast("int"), F.col("slope").cast("double"), F.col("intercept").cast("double"))


#: Query name → DataFrame builder; the batch engine's registry.
BATCH_QUERIES: dict[str, Callable[[SparkTables, Any], DataFrame]] = {
    "q01": q01, "q02": q02, "q03": q03, "q04": q04, "q15": q15}


def build_batch_query(name: str, data_dir: str | Path, params: Any = None,
                      spark: SparkSession | None = None) -> DataFrame:
    """The (lazy) DataFrame of query ``name`` over ``data_dir``; tables are validated here."""
    from elastream.spark.session import get_session

    if name not in BATCH_QUERIES:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(BATCH_QUERIES)}")
    params = default_params(name) if params is None else params
    if not isinstance(params, params_class(name)):
        raise TypeError(f"{name} takes {params_class(name).__name__}, not {type(params).__name__}")
    tables = SparkTables(spark or get_session(), data_dir)
    for table in QUERY_TABLES[name]:
        tables[table]  # validate every input before Spark plans anything
    return BATCH_QUERIES[name](tables, params)


def run_batch(name: str, data_dir: str | Path, params: Any = None, spark: SparkSession | None = None) -> QueryRun:
    """Run query ``name`` on Spark and time it (latencies are ``None``: a batch has none); see :func:`run_batch_query`."""
    frame = build_batch_query(name, data_dir, params, spark)
    windowed = name == "q01" and bool(getattr(params, "window_s", None))
    start = time.perf_counter()
    answer = frame.toArrow().cast(answer_schema(name, windowed=windowed))
    seconds = time.perf_counter() - start
    return QueryRun(query=name, engine=ENGINE, answer=answer, seconds=seconds,
                    input_rows=io.row_count(data_dir, QUERY_TABLES[name][0]))


def run_batch_query(name: str, data_dir: str | Path, params: Any = None,
                    spark: SparkSession | None = None) -> pa.Table:
    """The batch answer of query ``name`` (``q01`` … ``q15``) on ``data_dir`` as a ``pyarrow.Table``.

    ``params`` defaults to the spec §3 values; ``spark`` to the shared session.
    Columns and row order are those of §4.

    Example: ``run_batch_query("q04", data).column_names == ["avg_pages"]``
    """
    return run_batch(name, data_dir, params, spark).answer


def add_arguments(parser: Any) -> None:
    """CLI flags of the Spark engines: ``--master`` (the engine registry's hook)."""
    add_argument_once(parser, "--master", default=None, metavar="URL",
                      help="Spark master URL (default: standard Spark configuration, else local[*]; "
                           "SPARK_REMOTE selects Spark Connect)")


def run_engine(query: str, data_dir: Path, params: Any, options: Mapping[str, Any]) -> QueryRun:
    """The ``spark-batch`` engine of :mod:`elastream.tpcxbb.engines`: a session on ``options["master"]``, then
    :func:`run_batch`."""
    from elastream.spark.session import get_session

    return run_batch(query, data_dir, params, get_session(options.get("master")))
