"""Table and stream schemas of the TPCx-BB subset (spec §2, §5), as pyarrow types.

The types follow the kit's Hive DDL (spec §2): ``bigint`` → ``int64``,
``int`` → ``int32``, ``decimal(7,2)`` → ``decimal128(7, 2)``, ``string`` →
``string``. :data:`TABLES` holds every column the generator writes;
:data:`USED_COLUMNS` the subset the five queries read, which is all a reader
checks (hand-made test tables may carry only those).

The two event streams (§5) are the fact tables sorted by event time:
``ss_stream`` has the store_sales columns plus ``ss_line_number`` (the line's
1-based position in its ticket, the last key of the SS total order);
``wcs_stream`` has the six web_clickstreams columns. :data:`STREAM_ORDER`
gives both sort orders.

Pure data and pure functions; importable without Spark. :func:`spark_schema`
imports pyspark lazily.

Example::

    >>> TABLES["web_page"].field("wp_type").type
    DataType(string)
    >>> STREAM_OF["ss_stream"]
    'store_sales'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

BIGINT = pa.int64()
INT = pa.int32()
MONEY = pa.decimal128(7, 2)  # decimal(7,2), spec §2
STRING = pa.string()

_SS_KEYS = ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_customer_sk", "ss_cdemo_sk", "ss_hdemo_sk",
            "ss_addr_sk", "ss_store_sk", "ss_promo_sk", "ss_ticket_number")
_SS_MONEY = ("ss_wholesale_cost", "ss_list_price", "ss_sales_price", "ss_ext_discount_amt", "ss_ext_sales_price",
             "ss_ext_wholesale_cost", "ss_ext_list_price", "ss_ext_tax", "ss_coupon_amt", "ss_net_paid",
             "ss_net_paid_inc_tax", "ss_net_profit")

#: Every table the generator writes, with the kit's column types (spec §2).
TABLES: dict[str, pa.Schema] = {
    "store_sales": pa.schema([*((c, BIGINT) for c in _SS_KEYS), ("ss_quantity", INT),
                              *((c, MONEY) for c in _SS_MONEY)]),
    "web_clickstreams": pa.schema([("wcs_click_date_sk", BIGINT), ("wcs_click_time_sk", BIGINT),
                                   ("wcs_sales_sk", BIGINT), ("wcs_item_sk", BIGINT), ("wcs_web_page_sk", BIGINT),
                                   ("wcs_user_sk", BIGINT)]),
    "item": pa.schema([("i_item_sk", BIGINT), ("i_category_id", INT), ("i_category", STRING)]),
    "web_page": pa.schema([("wp_web_page_sk", BIGINT), ("wp_type", STRING)]),
    "date_dim": pa.schema([("d_date_sk", BIGINT), ("d_date", STRING)]),
    "time_dim": pa.schema([("t_time_sk", BIGINT), ("t_time", INT), ("t_hour", INT), ("t_minute", INT),
                           ("t_second", INT)]),
    "customer": pa.schema([("c_customer_sk", BIGINT)]),
    "store": pa.schema([("s_store_sk", BIGINT)]),
}

#: The two event streams of §5: name → (table it sorts, schema).
STREAMS: dict[str, pa.Schema] = {
    "ss_stream": TABLES["store_sales"].append(pa.field("ss_line_number", INT)),
    "wcs_stream": TABLES["web_clickstreams"],
}
STREAM_OF: dict[str, str] = {"ss_stream": "store_sales", "wcs_stream": "web_clickstreams"}

#: The total orders of §5 ("Source order"). Every key sorts ascending with
#: NULLs first (Spark's and Hive's default), ``tstamp`` being
#: ``date_sk * 86400 + time_sk`` (§1), which sorts like (date_sk, time_sk).
STREAM_ORDER: dict[str, tuple[str, ...]] = {
    "ss_stream": ("ss_sold_date_sk", "ss_sold_time_sk", "ss_ticket_number", "ss_line_number"),
    "wcs_stream": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_user_sk", "wcs_sales_sk", "wcs_item_sk",
                   "wcs_web_page_sk"),
}

#: Columns the five queries read, per table (spec §2 "columns used"). Readers
#: validate these; extra columns are allowed.
USED_COLUMNS: dict[str, tuple[str, ...]] = {
    "store_sales": ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_store_sk", "ss_ticket_number",
                    "ss_net_paid"),
    "web_clickstreams": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_item_sk",
                         "wcs_web_page_sk", "wcs_user_sk"),
    "item": ("i_item_sk", "i_category_id"),
    "web_page": ("wp_web_page_sk", "wp_type"),
    "date_dim": ("d_date_sk", "d_date"),
    "time_dim": ("t_time_sk",),
    "customer": ("c_customer_sk",),
    "store": ("s_store_sk",),
    "ss_stream": ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_store_sk", "ss_ticket_number",
                  "ss_net_paid", "ss_line_number"),
    "wcs_stream": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_item_sk", "wcs_web_page_sk",
                   "wcs_user_sk"),
}

SECONDS_PER_DAY = 86_400  # §1: tstamp = date_sk * 86400 + time_sk


def schema_of(name: str) -> pa.Schema:
    """The full schema of a table or stream by name; ``KeyError`` naming the known ones otherwise."""
    if name in TABLES:
        return TABLES[name]
    if name in STREAMS:
        return STREAMS[name]
    raise KeyError(f"unknown TPCx-BB table or stream {name!r}; known: {', '.join([*TABLES, *STREAMS])}")


def used_schema(name: str) -> pa.Schema:
    """The columns of ``name`` that the queries read, with their types (the reader's contract)."""
    full = schema_of(name)
    return pa.schema([full.field(c) for c in USED_COLUMNS[name]])


def spark_type_name(t: pa.DataType) -> str:
    """The Spark SQL type name of a pyarrow type used here (``int64`` → ``bigint`` …).

    Example: ``spark_type_name(pa.decimal128(7, 2)) == "decimal(7,2)"``
    """
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    names = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string", pa.large_string(): "string",
             pa.float64(): "double"}
    try:
        return names[t]
    except KeyError:
        raise TypeError(f"no Spark type for pyarrow type {t}") from None


def spark_schema(name: str, columns: tuple[str, ...] | None = None) -> StructType:
    """The Spark ``StructType`` of a table or stream (all columns, or ``columns`` in that order)."""
    from pyspark.sql import types as T

    def spark_type(t: pa.DataType) -> Any:
        if pa.types.is_decimal(t):
            return T.DecimalType(t.precision, t.scale)
        return {"bigint": T.LongType(), "int": T.IntegerType(), "string": T.StringType(),
                "double": T.DoubleType()}[spark_type_name(t)]

    full = schema_of(name)
    fields = [full.field(c) for c in (columns or tuple(full.names))]
    return T.StructType([T.StructField(f.name, spark_type(f.type), nullable=True) for f in fields])

#: Tables each query reads in batch (the fact table first) and the stream it replays (§4, §5).
QUERY_TABLES: dict[str, tuple[str, ...]] = {
    "q01": ("store_sales", "item"),
    "q02": ("web_clickstreams",),
    "q03": ("web_clickstreams", "item"),
    "q04": ("web_clickstreams", "web_page"),
    "q15": ("store_sales", "item", "date_dim"),
}
QUERY_STREAM: dict[str, str] = {"q01": "ss_stream", "q02": "wcs_stream", "q03": "wcs_stream", "q04": "wcs_stream",
                                "q15": "ss_stream"}
