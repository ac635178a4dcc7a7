"""The Spark side of the translation on the driver: the query's frames, and the session settings it starts under.

:func:`flow_frame` chains the plan's layers (:mod:`elastream.spark.layers`) after
the source: one ``mapInArrow``, then one ``applyInPandasWithState`` per keyed
layer grouped by (route, key group), without timeouts or watermarks: the end of
stream reaches every key group as a row (:mod:`elastream.spark.streaming`).

Threading: called from the driver thread that starts the query.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.spark.layers import CTL_COLUMN, ROWS_SCHEMA, SEQ_COLUMN, KeyedLayer, SourceLayer
from elastream.spark.order_keys import ROW_BITS
from elastream.spark.plan import FlowPlan

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

#: The constant column added before each keyed layer (:func:`_as_row_copies`).
ROW_COPY_COLUMN = "_elastream_row"


def flow_frame(plan: FlowPlan, source: DataFrame, columns: tuple[str, ...]) -> DataFrame:
    """The Spark frame of a plan: the source layer, then one keyed layer after another (no operator twice)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    frame = source.mapInArrow(SourceLayer(plan.routes, plan.source, columns, plan.key_groups), ROWS_SCHEMA)
    for layer in plan.layers:
        steps = {i: plan.keyed[i] for i in layer}
        # Grouped by key group, not by key: one Python call per key group per micro-batch (keygroup_state).
        frame = _as_row_copies(frame).groupBy("r", "p").applyInPandasWithState(
            KeyedLayer(plan.routes, steps), ROWS_SCHEMA, "s binary", "append", GroupStateTimeout.NoTimeout)
    return frame


def _as_row_copies(frame: DataFrame) -> DataFrame:
    """``frame`` through a projection Spark cannot remove (it adds a constant column the layers ignore).

    The rows a Python layer returns are views of Arrow batches, which neither a
    shuffle nor a state operator takes (ClassCastException: ColumnarBatchRow
    cannot be cast to UnsafeRow, Spark 4); a projection copies them into rows
    they take, and keeps (r, p) as they are, so a layer already grouped by them
    feeds the next one without a shuffle.
    """
    from pyspark.sql import functions as F

    return frame.withColumn(ROW_COPY_COLUMN, F.lit(0).cast("byte"))


def source_frame(spark: SparkSession, watched: Path, schema: Any, columns: Sequence[str]) -> DataFrame:
    """The watched folder as a stream of (columns, control, sequence number)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    full = StructType([*schema.fields, StructField(CTL_COLUMN, LongType(), True)])
    # Spark keeps the newest file's age as "now" and ignores files older than maxFileAge (7 days by
    # default) after the first batch; linked stream files keep their own modification time.
    raw = spark.readStream.schema(full).option("maxFileAge", "36500d").parquet(str(watched / "*"))
    file_no = F.substring(F.col("_metadata.file_name"), 2, 9).cast("long")
    seq = F.shiftleft(file_no, ROW_BITS) + F.col("_metadata.row_index")
    return raw.select(*[F.col(c) for c in columns], F.col(CTL_COLUMN), seq.alias(SEQ_COLUMN))


# -- the session while the query starts -----------------------------------------------------------------------------

@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings while the query starts (a streaming query keeps its own copy), then restore them."""
    saved = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def local_workers_like_driver(spark: SparkSession) -> Iterator[None]:
    """In local mode, build the query's Python functions for workers running this interpreter and sys.path.

    Spark starts local workers with ``python3`` from PATH unless PYSPARK_PYTHON
    is set, and without the driver's sys.path; the flow's functions need this
    interpreter's packages and the modules they were defined in (tests, notebooks).
    A function captures both when it is wrapped, so they are restored afterwards.
    """
    remote = type(spark).__module__.startswith("pyspark.sql.connect")
    sc = None if remote else spark.sparkContext
    if sc is None or not str(sc.master).startswith("local"):
        yield
        return
    saved = (sc.pythonExec, sc.environment.get("PYTHONPATH"))
    if "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable
    sc.environment["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        yield
    finally:
        sc.pythonExec = saved[0]
        if saved[1] is None:
            sc.environment.pop("PYTHONPATH", None)
        else:
            sc.environment["PYTHONPATH"] = saved[1]

