"""The measurements of ``elastream bench spark``: one run of a query or of the Spark-native reference.

* :func:`local_run`: a query on the local engine with ``es.Runner()``'s
  defaults (elastic threads, one process, the Runner's batch size); its answer
  is the reference the Spark answers are checked against.
* :func:`spark_run`: a query on the ``spark-streaming`` engine in the current
  session, with Spark's streaming progress recorded
  (:class:`elastream.spark.progress.BatchLog`): end-to-end tuples/s (the
  engine's clock: first data step fed → flushing batch done), steady-state
  tuples/s (input rows / durations of the micro-batches with input after the
  first), the engine's p50/p99 micro-batch latency (each step's marker round
  trip) and the batches' duration percentiles.
* :func:`native_run`: the hand-written ``applyInPandasWithState`` keyed
  running sum (:mod:`elastream.bench._keyed_spark`) on as many tuples, cut into
  micro-batches of the same size, measured the same way.

Each returns a JSON-ready dict. Runs on the caller's thread (Spark's and the
Runner's workers do the work).
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

#: seed of the native reference's (key, value) pairs
NATIVE_SEED = 7


def runner_default_options() -> dict[str, Any]:
    """The local engine's options for ``es.Runner()``'s defaults: no thread, process or batch-size choice."""
    import elastream as es

    batch_size = inspect.signature(es.Runner).parameters["batch_size"].default
    return {"threads": None, "processes": None, "batch_size": batch_size}


def local_run(query: str, data_dir: Path) -> tuple[dict[str, Any], Any]:
    """``query`` on the local engine with Runner defaults: (its numbers, its answer)."""
    from elastream.tpcxbb.engines import get_engine
    from elastream.workloads.tpcxbb_demo import demo_params

    run = get_engine("local")(query, data_dir, demo_params(query), runner_default_options())
    return {"input_rows": run.input_rows, "answer_rows": run.answer.num_rows, "seconds": run.seconds,
            "tuples_per_second": run.tuples_per_second, "p50_ms": run.latency_p50_ms,
            "p99_ms": run.latency_p99_ms}, run.answer


def spark_run(spark: Any, query: str, data_dir: Path, reference: Any, rows_per_batch: int | None) -> dict[str, Any]:
    """``query`` on the spark-streaming engine in ``spark``'s session; its answer checked against ``reference``."""
    from elastream.spark.progress import BatchLog
    from elastream.tpcxbb.answers import answer_difference
    from elastream.tpcxbb.engines import get_engine
    from elastream.workloads.tpcxbb_demo import demo_params

    master = str(spark.sparkContext.master)
    with BatchLog(spark) as log:
        run = get_engine("spark-streaming")(query, data_dir, demo_params(query),
                                            {"master": master, "rows_per_batch": rows_per_batch})
    difference = answer_difference(query, reference, run.answer)
    return {"input_rows": run.input_rows, "answer_rows": run.answer.num_rows, "seconds": run.seconds,
            "tuples_per_second": run.tuples_per_second, "p50_ms": run.latency_p50_ms,
            "p99_ms": run.latency_p99_ms, **batch_numbers(log.batches),
            "match": difference is None, "difference": difference}


def batch_numbers(batches: list[Any]) -> dict[str, Any]:
    """Steady-state throughput and batch durations from Spark's progress reports."""
    from elastream.spark.progress import batch_percentiles_ms, steady_batches, steady_state

    rows, seconds = steady_state(batches)
    p50, p99 = batch_percentiles_ms(batches)
    return {"micro_batches": len(batches), "steady_batches": len(steady_batches(batches)),
            "steady_rows": rows, "steady_seconds": seconds,
            "steady_tuples_per_second": rows / seconds if seconds > 0 else None,
            "batch_p50_ms": p50, "batch_p99_ms": p99}


class NativeReference:
    """The Spark-native keyed running sum on ``tuples`` tuples over ``keys`` keys, ready to run in a session.

    The data and the plain loop's expected sums are made once; :meth:`run`
    builds the input files and a warm query in the current session, times one
    query over every file and checks its sums.
    """

    def __init__(self, tuples: int, keys: int, rounds: int, rows_per_batch: int):
        from elastream.bench.keyed import make_data, plain_loop

        self.tuples, self.keys, self.rounds = tuples, keys, rounds
        self.batches = max(1, math.ceil(tuples / rows_per_batch))
        self.data = make_data(tuples, keys, NATIVE_SEED)
        self.expected = plain_loop(self.data, rounds)

    def run(self, spark: Any) -> dict[str, Any]:
        """One timed query in ``spark``'s session (AssertionError when its sums differ from the plain loop's)."""
        from elastream.bench._keyed_spark import SparkKeyed
        from elastream.spark.progress import BatchLog

        job = SparkKeyed(self.data, self.rounds, master=str(spark.sparkContext.master), batches=self.batches)
        try:
            with BatchLog(spark) as log:
                seconds = job.run(self.expected)
            described = job.describe()
        finally:
            job.close()
        return {"input_rows": self.tuples, "keys": self.keys, "rounds": self.rounds, "seconds": seconds,
                "tuples_per_second": self.tuples / seconds if seconds > 0 else None, **batch_numbers(log.batches),
                "match": True, **described}


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the highest steady-state throughput (end to end where none has one), with the repeat count."""
    def score(run: dict[str, Any]) -> float:
        return run.get("steady_tuples_per_second") or run.get("tuples_per_second") or 0.0

    chosen = max(runs, key=score)
    return {**chosen, "repeats": len(runs), "match": all(r.get("match", True) for r in runs)}
