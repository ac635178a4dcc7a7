"""``elastream bench keyed --spark`` on tiny settings: the Spark row runs the same job and its outputs are checked."""

from __future__ import annotations

import json

import pytest

from elastream.bench import keyed
from elastream.cli.main import main

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TINY = ["--tuples", "2000", "--keys", "40", "--cost-us", "2", "--repeat", "1", "--partitions", "8", "--no-hand",
        "--processes", "2"]


def test_bench_keyed_spark_row_checks_its_outputs(spark, capsys):
    # The session fixture's master: the row reuses the cached session instead of starting a second JVM.
    assert main(["bench", "keyed", *TINY, "--spark", "--spark-master", "local[*]", "--spark-batches", "3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["config"]: r for r in result["results"]}
    row = rows["Spark local[*] applyInPandasWithState"]
    assert row["output_equal"] is True and row["seconds"] > 0 and row["reference"] is True
    assert row["speedup_vs_plain"] == pytest.approx(rows["plain loop"]["seconds"] / row["seconds"])
    assert row["speedup_paired"]["median"] == pytest.approx(row["speedup_vs_plain"])  # one repetition
    assert result["spark"]["micro_batches"] == 3 and result["spark"]["state_partitions"] is None
    assert "applyInPandasWithState" in keyed.spark_sentence(result, row, rows["elastream P=2"])


def test_spark_row_refuses_different_outputs(spark):
    from elastream.bench._keyed_spark import SparkKeyed

    data = keyed.make_data(300, 7, seed=3)
    row = SparkKeyed(data, rounds=2, master="local[*]", batches=2)
    try:
        expected = keyed.plain_loop(data, 2)
        assert row.run(expected) > 0
        wrong = expected[:-1] + [(expected[-1][0], expected[-1][1] + 1)]
        with pytest.raises(AssertionError, match="differ"):
            row.run(wrong)
    finally:
        row.close()
