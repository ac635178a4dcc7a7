"""The Spark row of ``elastream bench keyed``: the same ordered running sum per key on Spark Structured Streaming.

Written by hand with Spark's own streaming API, as a Spark user would write
this job (not with :func:`elastream.spark.streaming.run_flow_on_spark`, which
carries any flow's items pickled and costs Spark several times more here):

* the tuples go into ``batches`` Parquet files of ``(seq, key, value)``, read
  as a stream with ``maxFilesPerTrigger`` 1, so each file is one micro-batch;
* ``groupBy("key").applyInPandasWithState`` sorts each key's rows of a batch
  by ``seq``, adds the per-tuple function to the running sum it keeps in the
  group state and emits ``(seq, key, sum)``;
* the query runs with ``trigger(availableNow=True)`` into Parquet files; the
  driver reads them back, sorts by ``seq`` and checks the ``(key, sum)`` pairs
  equal the plain loop's outputs.

Timed: the query, from ``start()`` to its end (planning, Spark's Python
workers, every micro-batch, the sink's files). Not timed: the session's start,
writing the input files and one warm-up query over the first file.
The state store uses the master's core count as its partitions on a
``local[N]`` master (the session's setting otherwise).

GIL case: Spark runs the function in its Python worker processes, one task per
core of ``local[N]``: process parallelism, like elastream's P=2 row.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

#: Columns of the input files and of the query's output.
INPUT_SCHEMA = "seq long, key long, value long"
OUTPUT_SCHEMA = "seq long, key long, sum long"
STATE_SCHEMA = "total long"


class RunningSums:
    """The ``applyInPandasWithState`` function: a key's rows in ``seq`` order, its running sum kept in the state.

    Example (outside Spark, with a stand-in for the group state)::

        class State:
            exists, get = False, None
            def update(self, v): self.get = v
        frames = [pandas.DataFrame({"seq": [1, 0], "key": [5, 5], "value": [3, 4]})]
        next(RunningSums(rounds=1)((5,), iter(frames), State()))  # sums over value 4 then 3, in seq order
    """

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, key: tuple, frames: Any, state: Any) -> Any:
        import pandas as pd

        from elastream.bench.keyed import burn

        total = state.get[0] if state.exists else 0
        frame = pd.concat(list(frames)).sort_values("seq")  # a key's rows may come in several chunks, any order
        sums = []
        for value in frame["value"].tolist():
            total += burn(value, self.rounds)
            sums.append(total)
        state.update((total,))
        yield pd.DataFrame({"seq": frame["seq"].to_numpy(), "key": key[0], "sum": sums})


class SparkKeyed:
    """One Spark session, the input files and a warm query: :meth:`run` times one query over all the data.

    Example::

        spark_row = SparkKeyed(data, rounds, master="local[2]", batches=4)
        try:
            seconds = spark_row.run(expected)  # raises AssertionError when the outputs differ
        finally:
            spark_row.close()
    """

    def __init__(self, data: list[tuple[int, int]], rounds: int, master: str | None, batches: int):
        from elastream.spark.session import get_session

        if batches < 1:
            raise ValueError(f"--spark-batches must be at least 1, got {batches}")
        self.rounds = rounds
        self.master = master
        self.batches = min(batches, max(1, len(data)))
        self.spark = get_session(master=master)
        self.partitions = local_cores(str(self.spark.sparkContext.master))
        self._root = Path(tempfile.mkdtemp(prefix="elastream-bench-keyed-spark-"))
        self._runs = 0
        try:
            self._input = write_input(data, self._root / "input", self.batches)
            self._query_seconds(self._input[:1])  # planning, code generation and Python workers, off the clock
        except BaseException:
            self.close()
            raise

    def run(self, expected: list[tuple[int, int]]) -> float:
        """Run the query over every input file; check its ``(key, sum)`` pairs equal ``expected``; its seconds."""
        seconds, output = self._query_seconds(self._input)
        if output != expected:
            raise AssertionError("Spark's running sums differ from the plain loop's")
        return seconds

    def describe(self) -> dict[str, Any]:
        """The settings the row ran with (for the JSON)."""
        return {"master": str(self.spark.sparkContext.master), "micro_batches": self.batches,
                "state_partitions": self.partitions}

    def close(self) -> None:
        """Remove the input, checkpoint and output files (the session stays cached for later Spark work)."""
        shutil.rmtree(self._root, ignore_errors=True)

    def _query_seconds(self, files: list[Path]) -> tuple[float, list[tuple[int, int]]]:
        import pyarrow.parquet as pq
        from pyspark.sql.streaming.state import GroupStateTimeout

        self._runs += 1
        run = self._root / f"run{self._runs}"
        source = run / "source"
        source.mkdir(parents=True)
        for f in files:  # hard links keep the files' modification times, which order them in the stream
            (source / f.name).hardlink_to(f)
        saved = self.spark.conf.get("spark.sql.shuffle.partitions")
        if self.partitions is not None:  # a streaming query keeps the setting it started with
            self.spark.conf.set("spark.sql.shuffle.partitions", str(self.partitions))
        try:
            stream = self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
            writer = (stream.groupBy("key")
                      .applyInPandasWithState(RunningSums(self.rounds), OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                              GroupStateTimeout.NoTimeout)
                      .writeStream.format("parquet").option("path", str(run / "output"))
                      .option("checkpointLocation", str(run / "checkpoint")).trigger(availableNow=True))
            t0 = time.perf_counter()
            query = writer.start()
            query.awaitTermination()
            seconds = time.perf_counter() - t0
        finally:
            self.spark.conf.set("spark.sql.shuffle.partitions", saved)
        table = pq.read_table(run / "output", columns=["seq", "key", "sum"]).sort_by("seq")
        output = list(zip(table.column("key").to_pylist(), table.column("sum").to_pylist()))
        shutil.rmtree(run, ignore_errors=True)
        return seconds, output


def write_input(data: list[tuple[int, int]], folder: Path, batches: int) -> list[Path]:
    """``data`` as ``batches`` Parquet files of ``(seq, key, value)`` in stream order, their paths in that order.

    Spark's file source takes new files in modification-time order (to the millisecond), so file ``i`` is
    dated ``i`` seconds after the first.
    """
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    dated = time.time() - batches
    per = -(-len(data) // batches)
    files = []
    for i in range(batches):
        lo = i * per
        part = data[lo:lo + per]
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"seq": pa.array(range(lo, lo + len(part)), pa.int64()),
                                 "key": pa.array([k for k, _ in part], pa.int64()),
                                 "value": pa.array([v for _, v in part], pa.int64())}), path)
        os.utime(path, (dated + i, dated + i))
        files.append(path)
    return files


def local_cores(master: str) -> int | None:
    """The core count of a ``local[N]`` master (None for any other master).

    Example: ``local_cores("local[2]")`` → 2; ``local_cores("local[*]")`` → None
    """
    match = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master.strip())
    return int(match.group(1)) if match else None
