"""TPCx-BB queries 1, 2, 3, 4 and 15: engine-neutral pieces shared by every backend.

* :mod:`~elastream.tpcxbb.schema` — the tables and event streams of spec §2/§5
  as pyarrow schemas (and Spark types through :func:`spark_schema`).
* :mod:`~elastream.tpcxbb.params` — one frozen dataclass of parameters per
  query with the defaults of spec §3 (plus Q1's window of §5).
* :mod:`~elastream.tpcxbb.io` — locating and reading the generated Parquet
  tables and streams, validating columns and types first.
* :mod:`~elastream.tpcxbb.answers` — the answer columns of spec §4 and how two
  engines' answers are compared (§6).

The specification is ``shared/tpcxbb-queries.md``; "§n" in this package
refers to its sections. Nothing here imports Spark, so the local engine can
use it without a JVM.
"""

from __future__ import annotations

from elastream.tpcxbb.params import QUERIES, Q01Params, Q02Params, Q03Params, Q04Params, Q15Params, default_params

__all__ = ["QUERIES", "Q01Params", "Q02Params", "Q03Params", "Q04Params", "Q15Params", "default_params"]
