"""A data set whose event streams are cut to their first rows, for ``elastream bench spark --stream-rows``.

Spark's micro-batches at scale 0.5 take minutes per query on a busy machine;
the steady state needs a few batches, not the whole stream. The cut keeps
every table of the data set (so dimensions, keys and their state sizes stay
those of the scale) and the first ``rows`` rows of each event stream: the
streams are sorted by event time, so a prefix is a stream of its own, and the
local engine answers the same prefix, so answers are still compared.

Example::

    with stream_prefix(Path("data/sf0.5"), 600_000) as cut:
        run_query("q02", cut, params, {})
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STREAMS = ("ss_stream", "wcs_stream")


@contextmanager
def stream_prefix(data_dir: Path, rows: int) -> Iterator[Path]:
    """A temporary data folder: ``data_dir``'s tables linked, its streams cut to ``rows`` rows; removed afterwards."""
    if rows < 1:
        raise ValueError(f"--stream-rows must be at least 1, got {rows}")
    folder = Path(tempfile.mkdtemp(prefix="elastream-bench-spark-data-"))
    try:
        for entry in Path(data_dir).iterdir():
            if entry.name in STREAMS:
                write_prefix(data_dir, entry.name, rows, folder / entry.name)
            else:
                (folder / entry.name).symlink_to(entry.resolve())
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_prefix(data_dir: Path, name: str, rows: int, out: Path) -> int:
    """The first ``rows`` rows of stream ``name`` (in read order) as one Parquet file under ``out``; rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from elastream.tpcxbb.io import dataset_files

    out.mkdir(parents=True)
    parts, left = [], rows
    for file in dataset_files(data_dir, name):
        if left <= 0:
            break
        table = pq.read_table(file)
        parts.append(table.slice(0, left))
        left -= parts[-1].num_rows
    table = pa.concat_tables(parts)
    pq.write_table(table, out / "part-00000.parquet")
    return table.num_rows
