"""Validated Spark DataFrames over a TPCx-BB data directory.

:class:`SparkTables` validates each table's Parquet footers with
:func:`elastream.tpcxbb.io.validate` (a missing table or column, a wrong type
or an unreadable file raises :class:`~elastream.tpcxbb.io.TpcxbbDataError`
naming table, column and file) before Spark reads it, then reads it with the
spec §2 schema, so the queries see exactly the kit's types.

Used from the driver thread that runs the queries.

Example::

    tables = SparkTables(spark, "/tmp/tpcxbb-sf0.01")
    tables["item"].count()
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from elastream.tpcxbb import io
from elastream.tpcxbb.schema import USED_COLUMNS, spark_schema

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


def load(spark: SparkSession, data_dir: str | Path, name: str,
         columns: tuple[str, ...] | None = None) -> DataFrame:
    """Table or stream ``name`` as a DataFrame of ``columns`` (default: the used ones), validated first."""
    wanted = columns or USED_COLUMNS[name]
    files = io.validate(data_dir, name, wanted)
    schema = spark_schema(name, wanted)
    return spark.read.schema(schema).parquet(*(str(f) for f in files))


class SparkTables:
    """Lazily loaded, validated DataFrames of one data directory, by table name."""

    def __init__(self, spark: SparkSession, data_dir: str | Path) -> None:
        self.spark = spark
        self.data_dir = Path(data_dir)
        self._frames: dict[str, DataFrame] = {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._frames:
            self._frames[name] = load(self.spark, self.data_dir, name)
        return self._frames[name]
