"""TPCx-BB data generation on Spark (spec §7): the tables of §2 and the sorted streams of §5.

The job is pure Spark SQL (no Python UDFs), so it runs at JVM speed on any
master. Randomness is counter-based: every draw is
``xxhash64(seed, stream tag, row id[, line/click number])`` mapped to
[0, 1), so a value depends only on the seed and the row it belongs to — never
on the partitioning, the master or the order tasks run in. Two runs with the
same seed and scale write the same rows.

What follows K's generator model (spec §7), row for row:

* **store_sales** — one ticket per row id (``ss_ticket_number``), its date
  growing linearly over 2001-01-01..2006-01-02, one uniform time of day, one
  store and one customer; written out as 1–14 lines (uniform). Each line's
  item is 55% uniform, 5% one of the hot items 10000–10003, 40% Normal(items/2,
  60·SF_log5) through a fixed permutation. Money as in §7, ``ss_net_paid =
  ext_sales_price − coupon``.
* **web_clickstreams** — visits in chunks of 5: 4 visitor visits (11–21
  clicks, NULL sales key, a known user with probability 0.5, each click with
  its own item, page and time of day) and 1 buyer visit (3–6 browse clicks,
  then one purchase click per order line sharing the order's time and sales
  key, with the hot-item mixture). A visit shares one date.
* **item** (9 categories with the dictionary's weights; hot items 10000 and
  10002 in Home & Kitchen, 10001 in Music, 10003 in Electronics, as K's SF1
  answers of Q1 and Q3 imply), **web_page** (8 types, uniform), **date_dim**
  (1900-01-01..2200-01-01, ``d_date_sk`` = days since 1900-01-01, §1),
  **time_dim**, **customer**, **store**.

Deviations (recorded here and in the data set's ``_tpcxbb.json``):

* Below SF 1, K's scaling formulas break down (negative ``SF_log5``), so
  SF_linear = SF and SF_log5 = √SF there (both continuous at SF 1); the
  popular-item spread stays at SF 1's 60 items, as the item table does.
* The item table always reaches item 10003 and the store table store 10, so
  the hot items and Q1/Q15's store exist at every scale (§1).
* K's web_page count formula is negative below SF 1; the count stays 60 there.
* NULLs (rate ``null_chance``, K's 0.00025) are put only on foreign keys no
  stream order depends on: ``ss_store_sk``/``ss_customer_sk`` per ticket,
  ``wcs_item_sk``/``wcs_web_page_sk`` on browse clicks, ``i_category_id``.
* A buyer visit's browse clicks get the buyer as user (K draws them from the
  same visit row).

Threading: :func:`generate` runs the Spark job from the caller's thread; an
optional :class:`~elastream.spark.progress.StageProgress` draws from its own.

Example::

    result = generate("/tmp/tpcxbb-sf0.01", scale=0.01, seed=7)
    result.rows["web_clickstreams"]      # about 68 000 clicks
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.tpcxbb.io import META_FILE
from elastream.tpcxbb.schema import STREAM_OF, STREAM_ORDER, STREAMS, TABLES

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession

    from elastream.spark.progress import StageProgress

GENERATOR_VERSION = 1

FIRST_FACT_DATE_SK = 36_890  # 2001-01-01, days since 1900-01-01 (§1)
FACT_DAYS = 1_828  # 2001-01-01 .. 2006-01-02 inclusive (§1)
DATE_DIM_DAYS = 109_574  # 1900-01-01 .. 2200-01-01 inclusive (§7)
HOT_ITEMS = (10000, 10001, 10002, 10003)  # §7: 5% of order lines in both channels
# §7 "Inference from the SF1 golden Q1 answer": 10000–10002 in categories 1–3 (Q1's pairs), 10001 in 2 or 3
# (Q3's (10001, 10001) row); and since K's Q3 top rows hold no other hot item, 10000 and 10002 are not in 2–3.
HOT_ITEM_CATEGORY = {10000: 1, 10001: 2, 10002: 1, 10003: 5}
STORE_FOR_QUERIES = 10  # Q1's and Q15's store (§3)
PAGE_TYPES = ("general", "order", "welcome", "ad", "feedback", "protected", "dynamic", "review")  # §7
#: The 9 major categories and their share of items (§1, §7), id → (name, weight in %).
CATEGORIES: dict[int, tuple[str, float]] = {
    1: ("Home & Kitchen", 2.8), 2: ("Music", 45.2), 3: ("Books", 30.0), 4: ("Clothing & Accessories", 3.6),
    5: ("Electronics", 4.0), 6: ("Tools & Home Improvement", 2.2), 7: ("Toys & Games", 2.1),
    8: ("Movies & TV", 7.5), 9: ("Sports & Outdoors", 2.6)}

ALL_OUTPUTS: tuple[str, ...] = (*TABLES, *STREAMS)
STORE_CHANNEL, WEB_CHANNEL = 1, 2  # hash salts of the two sales channels' item draws
_U53 = float(1 << 53)
_SECOND_DRAW = 1_000  # tag offset of a normal draw's second uniform, outside every other tag


@dataclass(frozen=True, slots=True)
class TpcxbbSizes:
    """Row counts and distribution widths of one scale factor (spec §7 "Scaling")."""

    scale: float
    tickets: int
    orders: int
    visits: int
    items: int
    customers: int
    stores: int
    web_pages: int
    customer_sd: float
    item_sd: float

    @classmethod
    def for_scale(cls, scale: float) -> TpcxbbSizes:
        """The sizes of scale factor ``scale`` (> 0); see the module docstring for SF < 1.

        Example: ``TpcxbbSizes.for_scale(1).tickets == 90_000``
        """
        if not scale > 0 or math.isinf(scale):
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        root = math.sqrt(scale)
        if scale >= 1:
            sf_log5 = math.log(scale, 5) + 1
            sf_linear = scale * (2 - sf_log5 * root / scale)
            pages = round(60 * (math.log(scale, 1.5) + 1))
        else:
            sf_log5, sf_linear, pages = root, scale, 60
        tickets = max(1, round(90_000 * sf_linear))
        return cls(scale=scale, tickets=tickets, orders=tickets, visits=5 * tickets,
                   items=max(round(18_000 * root), max(HOT_ITEMS) + 1),
                   customers=max(1, round(100_000 * root)),
                   stores=max(round(12 * root), STORE_FOR_QUERIES + 1),
                   web_pages=max(pages, len(PAGE_TYPES)),
                   customer_sd=400 * sf_log5,
                   # The item table never shrinks below ~10 000 rows, so neither does the popular-item spread.
                   item_sd=60 * max(sf_log5, 1.0))


@dataclass(frozen=True, slots=True)
class DatagenResult:
    """What :func:`generate` wrote: folder, scale, seed, rows per table/stream and seconds per step."""

    out: Path
    scale: float
    seed: int
    rows: dict[str, int]
    seconds: float
    step_seconds: dict[str, float] = field(default_factory=dict)


class _Rng:
    """Counter-based uniforms: ``xxhash64(seed, tag, *keys)`` → [0, 1), as Spark Columns."""

    def __init__(self, seed: int) -> None:
        from pyspark.sql import functions as F

        self._F = F
        self._seed = F.lit(int(seed)).cast("long")

    def uniform(self, tag: int, *keys: Column) -> Column:
        """U[0, 1) determined by (seed, tag, keys)."""
        F = self._F
        bits = F.xxhash64(self._seed, F.lit(tag).cast("long"), *keys).bitwiseAND(F.lit((1 << 53) - 1))
        return bits.cast("double") / F.lit(_U53)

    def integer(self, tag: int, low: int | Column, high: int | Column, *keys: Column) -> Column:
        """A uniform integer in [low, high] (inclusive), as bigint."""
        F = self._F
        low_c = low if not isinstance(low, int) else F.lit(low)
        high_c = high if not isinstance(high, int) else F.lit(high)
        return (low_c + F.floor(self.uniform(tag, *keys) * (high_c - low_c + 1))).cast("long")

    def normal(self, tag: int, *keys: Column) -> Column:
        """A standard normal draw (Box–Muller over two uniforms)."""
        F = self._F
        u1 = F.lit(1.0) - self.uniform(tag, *keys)  # (0, 1]: log stays finite
        u2 = self.uniform(tag + _SECOND_DRAW, *keys)
        return F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2 * math.pi) * u2)

    def null_unless(self, tag: int, chance: float, value: Column, *keys: Column) -> Column:
        """``value``, or NULL with probability ``chance`` (K's generic NULL_CHANCE)."""
        F = self._F
        return F.when(self.uniform(tag, *keys) >= F.lit(chance), value)


def _permutation(n: int, seed: int) -> tuple[int, int]:
    """(a, b) of the bijection i → (a·i + b) mod n: the fixed permutation of popular items (§7)."""
    a = 2 * ((seed * 2654435761 + 40503) % max(1, n)) + 1
    while math.gcd(a, n) != 1:
        a += 2
    return a % n or 1, (seed * 97 + 12345) % n


class TpcxbbModel:
    """The generator's Spark DataFrames for one (sizes, seed); nothing runs until one is written.

    Example: ``TpcxbbModel(spark, TpcxbbSizes.for_scale(0.01), seed=7, null_chance=0.00025).item().count()``
    """

    # Stream tags of the RNG, one per independent draw, so draws never share a hash input.
    T_TIME, T_STORE, T_CUST_MIX, T_CUST_U, T_CUST_N, T_LINES, T_CDEMO, T_HDEMO, T_ADDR = range(1, 10)
    T_ITEM_MIX, T_ITEM_U, T_ITEM_HOT, T_ITEM_N, T_PROMO, T_QTY = range(20, 26)
    T_WHOLESALE, T_MARKUP, T_DISCOUNT, T_COUPON_P, T_COUPON, T_TAX = range(30, 36)
    T_KNOWN, T_VUSER, T_NCLICK, T_CTIME, T_CITEM, T_CPAGE, T_NBROWSE, T_OTIME, T_OLINES = range(40, 49)
    T_BUYER_MIX, T_BUYER_U, T_BUYER_N, T_CATEGORY = range(50, 54)
    T_NULL_STORE, T_NULL_CUST, T_NULL_ITEM, T_NULL_PAGE, T_NULL_CAT = range(60, 65)

    def __init__(self, spark: SparkSession, sizes: TpcxbbSizes, seed: int, null_chance: float) -> None:
        from pyspark.sql import functions as F

        self.spark, self.sizes, self.seed, self.null_chance = spark, sizes, seed, null_chance
        self.F = F
        self.rng = _Rng(seed)
        self.perm_a, self.perm_b = _permutation(sizes.items, seed)

    def _range(self, n: int, rows_per_partition: int) -> DataFrame:
        return self.spark.range(0, n, 1, max(1, math.ceil(n / rows_per_partition)))

    # -- shared draws ----------------------------------------------------------------------------------

    def _item_mixture(self, channel: int, *row: Column) -> Column:
        """§7 per-line item: 55% uniform, 5% hot 10000–10003, 40% Normal through a fixed permutation.

        ``channel`` keeps store tickets and web orders with the same row id independent.
        """
        F, rng, s = self.F, self.rng, self.sizes
        keys = (F.lit(channel).cast("long"), *row)
        mix = rng.uniform(self.T_ITEM_MIX, *keys)
        centre = F.round(F.lit(s.items / 2) + F.lit(s.item_sd) * rng.normal(self.T_ITEM_N, *keys))
        index = F.least(F.greatest(centre, F.lit(0)), F.lit(s.items - 1)).cast("long")
        popular = F.pmod(index * F.lit(self.perm_a) + F.lit(self.perm_b), F.lit(s.items))
        return (F.when(mix < 0.55, rng.integer(self.T_ITEM_U, 0, s.items - 1, *keys))
                .when(mix < 0.60, rng.integer(self.T_ITEM_HOT, HOT_ITEMS[0], HOT_ITEMS[-1], *keys))
                .otherwise(popular)).cast("long")

    def _customer_mixture(self, t_mix: int, t_u: int, t_n: int, *keys: Column) -> Column:
        """§7: 50% uniform over customers, 50% Normal(customers/2, 400·SF_log5)."""
        F, rng, s = self.F, self.rng, self.sizes
        hot = F.round(F.lit(s.customers / 2) + F.lit(s.customer_sd) * rng.normal(t_n, *keys))
        hot = F.least(F.greatest(hot, F.lit(0)), F.lit(s.customers - 1))
        return F.when(rng.uniform(t_mix, *keys) < 0.5, rng.integer(t_u, 0, s.customers - 1, *keys)) \
            .otherwise(hot).cast("long")

    def _fact_date(self, row: Column, rows: int) -> Column:
        """Dates grow linearly with the row id over the fact period (§7)."""
        F = self.F
        return (F.lit(FIRST_FACT_DATE_SK) + F.floor(row * F.lit(FACT_DAYS) / F.lit(rows))).cast("long")

    # -- fact tables -----------------------------------------------------------------------------------

    def store_sales_lines(self) -> DataFrame:
        """store_sales with ``ss_line_number``: one ticket per row id, 1–14 lines (§7 store_sales)."""
        F, rng, s, nc = self.F, self.rng, self.sizes, self.null_chance
        t = F.col("id")
        tickets = self._range(s.tickets, 50_000).select(
            t.alias("ss_ticket_number"),
            self._fact_date(t, s.tickets).alias("ss_sold_date_sk"),
            rng.integer(self.T_TIME, 0, 86_399, t).alias("ss_sold_time_sk"),
            rng.null_unless(self.T_NULL_STORE, nc, rng.integer(self.T_STORE, 0, s.stores - 1, t), t)
            .alias("ss_store_sk"),
            rng.null_unless(self.T_NULL_CUST, nc, self._customer_mixture(self.T_CUST_MIX, self.T_CUST_U,
                                                                         self.T_CUST_N, t), t)
            .alias("ss_customer_sk"),
            rng.integer(self.T_CDEMO, 0, 1_920_799, t).alias("ss_cdemo_sk"),
            rng.integer(self.T_HDEMO, 0, 7_199, t).alias("ss_hdemo_sk"),
            rng.integer(self.T_ADDR, 0, max(0, s.customers // 2 - 1), t).alias("ss_addr_sk"),
            rng.integer(self.T_LINES, 1, 14, t).alias("_lines"))
        lines = tickets.withColumn("ss_line_number", F.explode(F.sequence(F.lit(1), F.col("_lines").cast("int"))))
        key = (F.col("ss_ticket_number"), F.col("ss_line_number"))
        lines = lines.withColumn("ss_item_sk", self._item_mixture(STORE_CHANNEL, *key)) \
            .withColumn("ss_promo_sk", rng.integer(self.T_PROMO, 0, max(0, round(300 * math.sqrt(s.scale))), *key)) \
            .withColumn("ss_quantity", rng.integer(self.T_QTY, 1, 100, *key).cast("int"))
        lines = self._money(lines, key)
        return lines.select(*TABLES["store_sales"].names, "ss_line_number")

    def _money(self, lines: DataFrame, key: tuple[Column, ...]) -> DataFrame:
        """§7 "Money": wholesale U(1,100), list, sales price, coupon, net paid; all decimal(7,2)."""
        F, rng = self.F, self.rng

        def money(c: Column) -> Column:
            return F.round(c, 2).cast("decimal(7,2)")

        q = F.col("ss_quantity").cast("decimal(7,2)")
        out = lines.withColumn("ss_wholesale_cost", money(F.lit(1.0) + F.lit(99.0) * rng.uniform(self.T_WHOLESALE,
                                                                                                *key)))
        out = out.withColumn("ss_list_price", money(F.col("ss_wholesale_cost").cast("double")
                                                    * (F.lit(1.0) + rng.uniform(self.T_MARKUP, *key))))
        out = out.withColumn("ss_sales_price", money(F.col("ss_list_price").cast("double")
                                                     * (F.lit(1.0) - rng.uniform(self.T_DISCOUNT, *key))))
        out = out.withColumn("ss_ext_sales_price", money(F.col("ss_sales_price") * q))
        out = out.withColumn("ss_ext_wholesale_cost", money(F.col("ss_wholesale_cost") * q))
        out = out.withColumn("ss_ext_list_price", money(F.col("ss_list_price") * q))
        out = out.withColumn("ss_ext_discount_amt", money(F.col("ss_ext_list_price") - F.col("ss_ext_sales_price")))
        coupon = F.when(rng.uniform(self.T_COUPON_P, *key) < 0.8, F.lit(0.0)) \
            .otherwise(F.col("ss_ext_sales_price").cast("double") * rng.uniform(self.T_COUPON, *key))
        out = out.withColumn("ss_coupon_amt", money(coupon))
        out = out.withColumn("ss_net_paid", money(F.col("ss_ext_sales_price") - F.col("ss_coupon_amt")))
        tax = F.col("ss_net_paid").cast("double") * F.lit(0.09) * rng.uniform(self.T_TAX, *key)
        out = out.withColumn("ss_ext_tax", money(tax))
        out = out.withColumn("ss_net_paid_inc_tax", money(F.col("ss_net_paid") + F.col("ss_ext_tax")))
        return out.withColumn("ss_net_profit", money(F.col("ss_net_paid") - F.col("ss_ext_wholesale_cost")))

    def visits(self) -> DataFrame:
        """One row per visit (before expansion into clicks): chunks of 5, the 5th a buyer visit (§7).

        Columns: ``_visit`` (row id), ``_buyer``, ``_order`` (web order = row id / 5),
        ``wcs_click_date_sk``, ``wcs_user_sk``, ``_order_time``, ``_browse`` (browse
        clicks) and ``_lines`` (purchase clicks; 0 for visitor visits).
        """
        F, rng, s = self.F, self.rng, self.sizes
        v = F.col("id")
        order = F.floor(v / 5).cast("long")
        is_buyer = (F.pmod(v, F.lit(5)) == 4)
        buyer_user = self._customer_mixture(self.T_BUYER_MIX, self.T_BUYER_U, self.T_BUYER_N, order)
        visitor_user = F.when(rng.uniform(self.T_KNOWN, v) < 0.5, rng.integer(self.T_VUSER, 0, s.customers - 1, v))
        return self._range(s.visits, 250_000).select(
            v.alias("_visit"), is_buyer.alias("_buyer"), order.alias("_order"),
            F.when(is_buyer, self._fact_date(order, s.orders)).otherwise(self._fact_date(v, s.visits))
            .alias("wcs_click_date_sk"),
            F.when(is_buyer, buyer_user).otherwise(visitor_user).cast("long").alias("wcs_user_sk"),
            rng.integer(self.T_OTIME, 0, 86_399, order).alias("_order_time"),
            F.when(is_buyer, rng.integer(self.T_NBROWSE, 3, 6, v))
            .otherwise(rng.integer(self.T_NCLICK, 11, 21, v)).alias("_browse"),
            F.when(is_buyer, rng.integer(self.T_OLINES, 1, 14, order)).otherwise(F.lit(0)).alias("_lines"))

    def web_clickstreams(self) -> DataFrame:
        """Clicks of :meth:`visits`: browse clicks, then a buyer visit's purchase clicks (§7 web_clickstreams)."""
        F, rng, s, nc = self.F, self.rng, self.sizes, self.null_chance
        visits = self.visits()
        clicks = visits.withColumn("_click", F.explode(F.sequence(F.lit(1), (F.col("_browse") + F.col("_lines"))
                                                                  .cast("int"))))
        key = (F.col("_visit"), F.col("_click"))
        purchase = F.col("_click") > F.col("_browse")
        line = (F.col("_click") - F.col("_browse")).cast("long")
        browse_item = rng.null_unless(self.T_NULL_ITEM, nc, rng.integer(self.T_CITEM, 0, s.items - 1, *key), *key)
        browse_page = rng.null_unless(self.T_NULL_PAGE, nc, rng.integer(self.T_CPAGE, 0, s.web_pages - 1, *key),
                                      *key)
        return clicks.select(
            "wcs_click_date_sk",
            F.when(purchase, F.col("_order_time")).otherwise(rng.integer(self.T_CTIME, 0, 86_399, *key))
            .cast("long").alias("wcs_click_time_sk"),
            F.when(purchase, F.col("_order")).cast("long").alias("wcs_sales_sk"),
            F.when(purchase, self._item_mixture(WEB_CHANNEL, F.col("_order"), line)).otherwise(browse_item)
            .cast("long")
            .alias("wcs_item_sk"),
            F.when(purchase, rng.integer(self.T_CPAGE, 0, s.web_pages - 1, *key)).otherwise(browse_page)
            .cast("long").alias("wcs_web_page_sk"),
            "wcs_user_sk")

    # -- dimension tables ------------------------------------------------------------------------------

    def item(self) -> DataFrame:
        """Items 0..items−1 with a weighted category each; hot items get fixed categories (§7)."""
        F, rng = self.F, self.rng
        i = F.col("id")
        u = rng.uniform(self.T_CATEGORY, i) * F.lit(100.0)
        drawn, bound = None, 0.0
        for cat, (_, weight) in CATEGORIES.items():
            bound += weight
            drawn = (F.when(u < bound, F.lit(cat)) if drawn is None else drawn.when(u < bound, F.lit(cat)))
        assert drawn is not None
        category = drawn.otherwise(F.lit(max(CATEGORIES)))
        for sk, cat in HOT_ITEM_CATEGORY.items():
            category = F.when(i == sk, F.lit(cat)).otherwise(category)
        category = F.when(i.isin(*HOT_ITEMS), category) \
            .otherwise(rng.null_unless(self.T_NULL_CAT, self.null_chance, category, i)).cast("int")
        names = F.create_map(*[x for cat, (name, _) in CATEGORIES.items() for x in (F.lit(cat), F.lit(name))])
        return self._range(self.sizes.items, 1_000_000).select(
            i.alias("i_item_sk"), category.alias("i_category_id"),
            F.element_at(names, category).alias("i_category"))

    def web_page(self) -> DataFrame:
        """Pages with the 8 types of §7 in equal shares (a seeded rotation of the type list)."""
        F = self.F
        offset = self.seed % len(PAGE_TYPES)
        types = F.array(*[F.lit(t) for t in PAGE_TYPES])
        index = (F.pmod(F.col("id") + F.lit(offset), F.lit(len(PAGE_TYPES))) + 1).cast("int")
        return self._range(self.sizes.web_pages, 1_000_000).select(
            F.col("id").alias("wp_web_page_sk"), F.element_at(types, index).alias("wp_type"))

    def date_dim(self) -> DataFrame:
        """One row per day 1900-01-01..2200-01-01; ``d_date_sk`` counts days from 1900-01-01 (§1)."""
        F = self.F
        day = F.date_add(F.to_date(F.lit("1900-01-01")), F.col("id").cast("int"))
        return self._range(DATE_DIM_DAYS, 1_000_000).select(
            F.col("id").alias("d_date_sk"), F.date_format(day, "yyyy-MM-dd").alias("d_date"))

    def time_dim(self) -> DataFrame:
        """One row per second of the day (§1)."""
        F = self.F
        t = F.col("id")
        return self._range(86_400, 1_000_000).select(
            t.alias("t_time_sk"), t.cast("int").alias("t_time"), F.floor(t / 3600).cast("int").alias("t_hour"),
            F.pmod(F.floor(t / 60), F.lit(60)).cast("int").alias("t_minute"),
            F.pmod(t, F.lit(60)).cast("int").alias("t_second"))

    def keys(self, column: str, n: int) -> DataFrame:
        """A one-column key table 0..n−1 (customer, store)."""
        return self._range(n, 1_000_000).select(self.F.col("id").alias(column))


def generate(out: str | Path, scale: float, seed: int = 0, *, spark: SparkSession | None = None,
             master: str | None = None, progress: StageProgress | None = None, null_chance: float = 0.00025,
             outputs: Iterable[str] = ALL_OUTPUTS, stream_file_rows: int = 1_000_000) -> DatagenResult:
    """Generate the tables and streams of scale ``scale`` into ``out`` (overwriting them); return what was written.

    ``spark`` defaults to :func:`~elastream.spark.session.get_session` on
    ``master``. ``outputs`` restricts what is written (names of
    :data:`ALL_OUTPUTS`). Each stream is written as files of about
    ``stream_file_rows`` rows, in order. Writes ``out/_tpcxbb.json``
    describing the data set.
    """
    from elastream.spark.session import get_session

    chosen = tuple(outputs)
    unknown = sorted(set(chosen) - set(ALL_OUTPUTS))
    if unknown:
        raise ValueError(f"unknown outputs {unknown}; known: {', '.join(ALL_OUTPUTS)}")
    spark = spark or get_session(master)
    sizes = TpcxbbSizes.for_scale(scale)
    model = TpcxbbModel(spark, sizes, seed, null_chance)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    (root / META_FILE).unlink(missing_ok=True)  # a half-written data set has no description
    start = time.perf_counter()
    rows: dict[str, int] = {}
    steps: dict[str, float] = {}
    facts = {"store_sales": model.store_sales_lines, "web_clickstreams": model.web_clickstreams}
    dims = {"item": model.item, "web_page": model.web_page, "date_dim": model.date_dim, "time_dim": model.time_dim,
            "customer": lambda: model.keys("c_customer_sk", sizes.customers),
            "store": lambda: model.keys("s_store_sk", sizes.stores)}
    for name, build in dims.items():
        if name in chosen:
            rows[name], steps[name] = _write(build(), root / name, name, progress)
    for table, build in facts.items():
        stream = next(s for s, t in STREAM_OF.items() if t == table)
        if table not in chosen and stream not in chosen:
            continue
        frame = build().persist()
        try:
            if table in chosen:
                rows[table], steps[table] = _write(frame.select(*TABLES[table].names), root / table, table,
                                                   progress)
            if stream in chosen:
                rows[stream], steps[stream] = _write(_sorted_stream(frame, stream, stream_file_rows), root / stream,
                                                     stream, progress)
        finally:
            frame.unpersist()
    result = DatagenResult(out=root, scale=scale, seed=seed, rows=rows, seconds=time.perf_counter() - start,
                           step_seconds=steps)
    _write_meta(root, result, sizes, null_chance)
    return result


def _sorted_stream(frame: DataFrame, stream: str, file_rows: int) -> DataFrame:
    """``frame`` in the total order of §5, range-partitioned into files of about ``file_rows`` rows.

    Range partitions are ordered and each is sorted, so the part files read in
    name order (``part-00000``, ``part-00001`` …) are the stream in order.
    """
    order = STREAM_ORDER[stream]
    files = max(1, math.ceil(frame.count() / file_rows))
    return frame.select(*STREAMS[stream].names).repartitionByRange(files, *order).sortWithinPartitions(*order)


def _write(frame: DataFrame, path: Path, label: str, progress: StageProgress | None) -> tuple[int, float]:
    """Write ``frame`` as Parquet into ``path`` (replacing it); return (rows, seconds)."""
    start = time.perf_counter()
    if path.exists():
        shutil.rmtree(path)
    spark = frame.sparkSession
    if progress is None:
        frame.write.mode("overwrite").parquet(str(path))
    else:
        with progress.step(label):
            frame.write.mode("overwrite").parquet(str(path))
    rows = spark.read.parquet(str(path)).count()  # from the footers: cheap
    return rows, time.perf_counter() - start


def _write_meta(root: Path, result: DatagenResult, sizes: TpcxbbSizes, null_chance: float) -> None:
    meta: dict[str, Any] = {
        "generator": "elastream.spark.datagen", "version": GENERATOR_VERSION, "scale": result.scale,
        "seed": result.seed, "null_chance": null_chance, "sizes": asdict(sizes), "rows": result.rows,
        "seconds": round(result.seconds, 3), "hot_items": list(HOT_ITEMS),
        "hot_item_category": {str(k): v for k, v in HOT_ITEM_CATEGORY.items()},
        "fact_dates": ["2001-01-01", "2006-01-02"],
        "stream_order": {k: list(v) for k, v in STREAM_ORDER.items()},
    }
    (root / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
