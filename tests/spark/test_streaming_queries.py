"""The spark-streaming engine (the §5 pipelines translated to Spark Structured Streaming) against spark-batch.

On the generated scale-0.01 data set every query's spark-streaming answer
equals the spark-batch answer (exactly; Q4 rounded to 1 decimal, Q15 to 7,
spec §6), with the parameter sets that give non-trivial answers at that scale.
Two stream files per micro-batch and two state partitions keep each run to a
handful of micro-batches.
"""

from __future__ import annotations

import argparse

import pyarrow as pa
import pytest

from elastream.tpcxbb.answers import answer_difference
from elastream.tpcxbb.io import row_count
from elastream.tpcxbb.schema import QUERY_STREAM
from elastream.tpcxbb.spark_streaming import add_arguments, run_query
from tpcxbb_cases import CASES

pytestmark = pytest.mark.spark

OPTIONS = {"max_files_per_trigger": 2, "shuffle_partitions": 2}


def test_engine_flags_and_the_data_set(tpcxbb_data):
    # First in the module, and cheap: the session's Spark start and data generation land on this test.
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--checkpoint", "/tmp/x", "--max-files-per-trigger", "3", "--shuffle-partitions", "2"])
    assert (args.checkpoint, args.max_files_per_trigger, args.shuffle_partitions) == ("/tmp/x", 3, 2)
    assert parser.parse_args(["--rows-per-batch", "5000"]).rows_per_batch == 5000
    assert row_count(tpcxbb_data, "wcs_stream") > 0


# The cheapest query first: the first streaming run also starts Spark's Python workers.
@pytest.mark.parametrize("query", ["q15", "q04", "q03", "q02", "q01"])
def test_spark_streaming_answer_equals_spark_batch(query, spark, tpcxbb_data, tmp_path):
    from elastream.spark.batch import run_batch_query

    params = CASES[query]
    run = run_query(query, tpcxbb_data, params, {**OPTIONS, "checkpoint": tmp_path})
    expected = run_batch_query(query, tpcxbb_data, params, spark)

    assert run.answer.num_rows > 0
    _assert_same(query, expected, run.answer)
    assert run.engine == "spark-streaming"
    assert run.input_rows == row_count(tpcxbb_data, QUERY_STREAM[query])
    assert run.seconds > 0 and run.latency_p50_ms is not None and run.latency_p99_ms >= run.latency_p50_ms
    assert [p.name.startswith(query) for p in tmp_path.iterdir()] == [True]  # the run's checkpoint, kept


def _assert_same(query: str, expected: pa.Table, actual: pa.Table) -> None:
    assert actual.schema == expected.schema
    difference = answer_difference(query, expected, actual)
    assert difference is None, difference
