"""Fixtures of the Spark suites: one shared SparkSession and one generated data set per test session.

* ``spark``: :func:`elastream.spark.session.get_session` with the default
  master (``local[*]``) and 4 shuffle partitions — the same cached session the
  CLI uses in-process, so CLI tests start no second JVM. Stopped at the end.
* ``tpcxbb_data``: a scale-0.01 data set (seed 11) generated once into a
  session temp folder, its streams split into files of 20 000 rows.
* ``write_tables``: write hand-made tables (lists of dicts) as Parquet with
  the spec §2 types of the columns given, for the edge-case tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elastream.tpcxbb.schema import schema_of

SCALE = 0.01
SEED = 11


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The shared local SparkSession of the test session."""
    from elastream.spark.session import get_session, stop_session

    session = get_session(conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    stop_session()


@pytest.fixture(scope="session")
def tpcxbb_data(spark, tmp_path_factory) -> Path:
    """A generated scale-0.01 data set (every table and stream)."""
    from elastream.spark.datagen import generate

    out = tmp_path_factory.mktemp("tpcxbb") / f"sf{SCALE}"
    generate(out, SCALE, SEED, spark=spark, stream_file_rows=20_000)  # several stream files: their order counts
    return out


def write_table(root: Path, name: str, rows: list[dict]) -> Path:
    """Write ``rows`` as ``root/name/part-00000.parquet`` with the spec types of the rows' columns."""
    full = schema_of(name)
    schema = pa.schema([full.field(c) for c in rows[0]])
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


@pytest.fixture
def write_tables(tmp_path) -> Callable[..., Path]:
    """``write_tables(store_sales=[{...}, ...], item=[...])`` → a data folder holding those tables."""
    def write(**tables: list[dict]) -> Path:
        for name, rows in tables.items():
            write_table(tmp_path, name, rows)
        return tmp_path
    return write


@pytest.fixture
def demo_cache(tpcxbb_data, tmp_path, monkeypatch) -> Path:
    """The session's data set placed where ``elastream demo`` / ``bench tpcxbb`` cache theirs (not generated again).

    Those commands then find scale ``SCALE`` and seed ``SEED`` already there.
    """
    from elastream.workloads.tpcxbb_demo import demo_data_dir

    monkeypatch.setenv("ELASTREAM_CACHE", str(tmp_path))
    target = demo_data_dir(SCALE, SEED)
    target.parent.mkdir(parents=True)
    target.symlink_to(tpcxbb_data, target_is_directory=True)
    return target
