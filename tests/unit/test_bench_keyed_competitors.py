"""The Spark and Bytewax rows of ``bench keyed`` in parts: group function, input files, cores, dataflow."""

from __future__ import annotations

import os

import pandas as pd
import pyarrow.parquet as pq
import pytest

from elastream.bench import keyed
from elastream.bench._keyed_spark import RunningSums, local_cores, write_input


class _State:
    """A stand-in for Spark's GroupState: what RunningSums reads and writes."""

    def __init__(self, total: int | None = None):
        self.exists = total is not None
        self.get = (total,) if total is not None else None

    def update(self, value: tuple) -> None:
        self.exists, self.get = True, value


def test_running_sums_follow_seq_order_across_chunks_and_keep_the_total():
    state = _State()
    chunks = [pd.DataFrame({"seq": [7, 2], "key": [5, 5], "value": [30, 10]}),
              pd.DataFrame({"seq": [4], "key": [5], "value": [20]})]
    (out,) = list(RunningSums(rounds=3)((5,), iter(chunks), state))
    b = [keyed.burn(v, 3) for v in (10, 20, 30)]   # seq order 2, 4, 7
    assert out["seq"].tolist() == [2, 4, 7] and out["key"].tolist() == [5, 5, 5]
    assert out["sum"].tolist() == [b[0], b[0] + b[1], b[0] + b[1] + b[2]]
    assert state.get == (sum(b),)
    # the next micro-batch starts from the kept total
    (later,) = list(RunningSums(rounds=3)((5,), iter([pd.DataFrame({"seq": [9], "key": [5], "value": [1]})]), state))
    assert later["sum"].tolist() == [sum(b) + keyed.burn(1, 3)]


def test_input_files_hold_the_data_in_stream_order_dated_in_that_order(tmp_path):
    data = keyed.make_data(10, 3, seed=2)
    files = write_input(data, tmp_path / "in", batches=3)
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert rows == [{"seq": i, "key": k, "value": v} for i, (k, v) in enumerate(data)]
    dates = [os.stat(f).st_mtime for f in files]
    assert dates[1] - dates[0] >= 1.0 and dates[2] - dates[1] >= 1.0  # Spark compares them to the millisecond


@pytest.mark.parametrize("master, cores", [("local[2]", 2), ("local[16]", 16), ("local[3, 2]", 3),
                                           ("local[*]", None), ("local", None), ("spark://h:7077", None)])
def test_state_partitions_follow_a_local_masters_cores(master, cores):
    assert local_cores(master) == cores


def test_bytewax_dataflow_keeps_each_keys_running_sum():
    from bytewax.testing import run_main

    from elastream.bench._keyed_bytewax import build_dataflow

    data = keyed.make_data(400, 9, seed=4)
    out: list = []
    run_main(build_dataflow(data, 2, out))
    assert [(k, s) for _, k, s in sorted(out)] == keyed.plain_loop(data, 2)
