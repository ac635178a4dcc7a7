"""``es.Runner(backend="spark")``: the Spark backend behind the RunHandle protocol (elastream.spark.backend).

* A FromParquet → map → filter → key_by().reduce() → Collect flow gives, on
  Spark, exactly the outputs of ``es.Runner()`` on the same flow, with a
  RunResult whose statistics count the source rows and the sink tuples.
* The handle answers like every backend: ``set_threads`` keeps the count,
  ``submit`` answers decisions as not applied, ``wait(timeout)`` times out,
  ``shutdown`` keeps what reached the sinks.
* A local-only operator is refused at start, naming it, before Spark runs; an
  operator failing in a Spark worker raises OperatorError from ``wait``.

The step functions live at module level: Spark's workers import this module.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import elastream as es
from elastream.errors import OperatorError
from elastream.runtime.decisions import SetThreads
from elastream.runtime.handle import RunHandle
from elastream.spark.backend import SparkRunHandle
from elastream.spark.streaming import SparkTranslationError
from parquet_parts import write_user_amounts

pytestmark = pytest.mark.spark

ROWS_PER_FILE = 10


def write_files(folder: Path, n_files: int) -> list[Path]:
    """``n_files`` Parquet files of (user, amount), amount counting up across files."""
    return write_user_amounts(folder, n_files, ROWS_PER_FILE, users=4, step=3)


# -- step functions (module level: pickled by reference, imported by the workers) ---------------------------------

def as_pair(row: dict) -> tuple[str, int]:
    return row["user"], row["amount"]


def not_multiple_of_3(pair: tuple[str, int]) -> bool:
    return pair[1] % 3 != 0


def user_of(pair: tuple[str, int]) -> str:
    return pair[0]


def add_amount(total: int, pair: tuple[str, int]) -> int:
    return total + pair[1]


def fails_on_7(pair: tuple[str, int]) -> tuple[str, int]:
    if pair[1] == 7:
        raise ValueError("amount 7 is unlucky")
    return pair


def totals_flow(files: list[Path], step=as_pair) -> es.Flow:
    flow = es.Flow("totals")
    flow.source(es.ops.FromParquet(files), name="src").map(step, name="pairs").filter(not_multiple_of_3) \
        .key_by(user_of).reduce(add_amount, initial=int, name="totals").sink(es.ops.Collect(), name="out")
    return flow


class Doubler(es.Operator):
    def __init__(self):
        super().__init__(inputs=1, outputs=1)

    async def process(self, ctx):
        port, out = ctx.inputs[0], ctx.outputs[0]
        while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
            await out.push(port.pop() * 2)


# -- runs --------------------------------------------------------------------------------------------------------

def test_spark_backend_outputs_equal_the_local_run(spark, tmp_path):
    flow = totals_flow(write_files(tmp_path, 2))
    want = es.Runner().run(flow)

    handle = es.Runner(backend="spark").start(flow)
    assert isinstance(handle, SparkRunHandle) and isinstance(handle, RunHandle)
    result = handle.wait(timeout=300)

    assert result.outputs == want.outputs
    assert len(want.outputs["out"]) == 2 * ROWS_PER_FILE - 7  # 0, 3, ..., 18 are filtered out
    ops = result.stats.operators
    assert ops["src"].tuples_out == 2 * ROWS_PER_FILE
    assert ops["out"].tuples_in == len(result.outputs["out"]) and ops["out"].activations >= 1
    assert ops["totals"].kind == "partitioned" and result.stats.policy == "spark"
    assert result.elapsed_s > 0 and not result.shutdown
    assert handle.finished.is_set() and set(handle.states().values()) == {"completed"}


def test_handle_answers_like_every_backend_and_shutdown_keeps_a_prefix(spark, tmp_path):
    flow = totals_flow(write_files(tmp_path, 3))
    want = es.Runner().run(flow).outputs["out"]
    handle = es.Runner(backend="spark").start(flow)
    try:
        assert handle.set_threads(4) == 1  # Spark runs its own tasks: the count stays
        applied = handle.submit([SetThreads(2, reason="test")])
        assert [a.ok for a in applied] == [False] and "Spark" in applied[0].why
        assert handle.timeline == applied
        with pytest.raises(TimeoutError, match="still running"):
            handle.wait(timeout=0.01)  # the query takes seconds to start
        assert set(handle.states().values()) == {"running"}
    finally:
        result = handle.shutdown(timeout=300)
    assert result.shutdown
    got = result.outputs["out"]
    assert got == want[:len(got)]  # whole steps reached the sink, in order
    assert not any(t.name.startswith("elastream-spark-") for t in threading.enumerate())


# -- errors ------------------------------------------------------------------------------------------------------

def test_a_local_only_operator_is_refused_at_start_before_spark_runs(tmp_path):
    flow = es.Flow("coroutine")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 1)), name="src").then(Doubler(), name="doubler") \
        .sink(es.ops.Collect(), name="out")
    before = threading.active_count()
    with pytest.raises(SparkTranslationError, match="'doubler'.*coroutine.*local-only") as info:
        es.Runner(backend="spark").start(flow)
    assert info.value.operator == "doubler"
    assert threading.active_count() == before  # no driver thread was started


def test_a_sink_other_than_collect_is_refused_naming_it(tmp_path):
    flow = es.Flow("callback")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 1)), name="src") \
        .sink(es.ops.Callback(print), name="printer")
    with pytest.raises(SparkTranslationError, match="'printer'.*local-only") as info:
        es.Runner(backend="spark").run(flow)
    assert info.value.operator == "printer"


def test_an_operator_failing_in_a_spark_worker_raises_operator_error_from_wait(spark, tmp_path):
    flow = totals_flow(write_files(tmp_path, 1), step=lambda row: fails_on_7(as_pair(row)))
    handle = es.Runner(backend="spark").start(flow)
    with pytest.raises(OperatorError, match="amount 7 is unlucky") as info:
        handle.wait(timeout=300)
    assert info.value.operator == "pairs"
    assert handle.finished.is_set()
