"""Small Parquet inputs for the tests that run flows on Spark (and the same flows locally)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_user_amounts(folder: Path, n_files: int, rows_per_file: int, users: int, step: int) -> list[Path]:
    """``n_files`` Parquet files of (user, amount): amounts count up across the files, and the row
    with amount ``a`` belongs to user ``f"u{a * step % users}"``."""
    files = []
    for i in range(n_files):
        amounts = range(i * rows_per_file, (i + 1) * rows_per_file)
        table = pa.table({"user": pa.array([f"u{a * step % users}" for a in amounts], pa.string()),
                          "amount": pa.array(list(amounts), pa.int64())})
        path = folder / f"part-{i:03d}.parquet"
        pq.write_table(table, path)
        files.append(path)
    return files
