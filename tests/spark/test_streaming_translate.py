"""Flows of declarative operators on Spark Structured Streaming (elastream.spark.streaming).

* Generic flows (stateless only with two sinks; map, filter, flat_map,
  key_by.process with on_end, key_by.reduce, windowed aggregates, stateful process with on_end,
  fan-out to several sinks, a union) over small Parquet files give exactly the outputs, in order, of a
  sequential local run (``es.Runner(threads=1)``); a union's outputs as a
  multiset (its interleaving is not defined locally either).
* Operators Spark cannot run are refused before Spark starts, naming them.
* A failing function (a step's, or an on_end hook's in the last batch, which carries the end)
  stops the query with an OperatorError naming its operator.
* Order keys and key bytes (pure functions) sort and group as documented.
* The translator matches on operator specs: its modules import no operator
  class from elastream.ops.

Each Spark run feeds a few small files (in one step of rows by default, one
micro-batch per file where a test says so), to stay quick. The step functions
live at module level: Spark's workers import this module.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.errors import OperatorError
from elastream.spark.streaming import SparkTranslationError, child_key, end_key, key_bytes, plan_flow, \
    run_flow_on_spark, source_key

pytestmark = pytest.mark.spark

ROWS_PER_FILE = 12


def write_files(folder: Path, n_files: int) -> list[Path]:
    """``n_files`` Parquet files of clicks (user, x, note), x counting up across files."""
    files = []
    for i in range(n_files):
        xs = range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)
        table = pa.table({"user": pa.array([x * 7 % 5 for x in xs], pa.int64()),
                          "x": pa.array(list(xs), pa.int64()),
                          "note": pa.array([None if x % 4 == 0 else f"n{x}" for x in xs], pa.string())})
        path = folder / f"part-{i:03d}.parquet"
        pq.write_table(table, path)
        files.append(path)
    return files


def local_outputs(flow: es.Flow) -> dict:
    return es.Runner(threads=1).run(flow).outputs


# -- step functions (module level: pickled by reference, imported by the workers) ---------------------------------

def project(row: dict) -> tuple:
    return (row["user"], row["x"], row["note"])


def has_note(click: tuple) -> bool:
    return click[2] is not None


def twice(click: tuple) -> list:
    return [click, (click[0], -click[1], click[2])]


def user_of(click: tuple) -> int:
    return click[0]


def running_sum(total: list, click: tuple) -> tuple[list, list]:
    total[0] += click[1]
    total[1] += 1
    return total, [(click[0], "sum", total[0])] if total[1] % 3 == 0 else []


def flush_user(user: int, total: list) -> list:
    return [(user, "end", total[0], total[1])]


def parity(row: tuple) -> int:
    return row[0] % 2


def count_rows(n: int, row: tuple) -> int:
    return n + 1


def collect_ends(seen: list, row: tuple) -> tuple[list, list]:
    if row[1] == "end":
        seen.append(row[0])
    return seen, [("ends so far", len(seen))] if row[1] == "end" else []


def report(seen: list) -> list:
    return [("users", tuple(seen))]


def user_key(row: dict) -> int:
    return row["user"]


def first_notes(notes: list, row: dict) -> tuple[list, list]:
    notes.append(row["note"])
    return notes, [(row["user"], len(notes), row["note"])]


def flush_notes(user: int, notes: list) -> list:
    return [(user, "notes", len(notes))]


def never(row: tuple) -> bool:
    return False


def count_all(n: int, row: tuple) -> tuple[int, list]:
    return n + 1, [n + 1]


def final_count(n: int) -> list:
    return [("count", n)]


def fails_at_end(n: int) -> list:
    raise LookupError(f"no end after {n} rows")


def click_time(click: tuple) -> float:
    return click[1] * 7.0


def add_x(total: int, click: tuple) -> int:
    return total + click[1]


def fails_on_x_13(row: dict) -> dict:
    if row["x"] == 13:
        raise ValueError("x is 13")
    return row


# -- flows on Spark vs local ---------------------------------------------------------------------------------------

def test_stateless_flow_with_two_sinks_equals_the_local_run(spark, tmp_path):
    # First of the Spark runs and the cheapest: the session's start and the first Python workers land here.
    flow = es.Flow("stateless")
    clicks = flow.source(es.ops.FromParquet(write_files(tmp_path, 2)), name="src").map(project)
    clicks.filter(has_note).flat_map(twice).sink(es.ops.Collect(), name="doubled")
    clicks.map(user_of).sink(es.ops.Collect(), name="users")

    got = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2)

    assert got.outputs == local_outputs(flow)
    assert len(got.outputs["users"]) == 2 * ROWS_PER_FILE


def test_chain_of_every_kind_equals_the_sequential_local_run(spark, tmp_path):
    """map → filter → flat_map → key_by.process(on_end) → key_by.reduce, a stateful branch, and a union."""
    flow = es.Flow("every-kind")
    clicks = flow.source(es.ops.FromParquet(write_files(tmp_path, 2)), name="src") \
        .map(project).filter(has_note).flat_map(twice)
    sums = clicks.key_by(user_of, partitions=4).process(running_sum, state=lambda: [0, 0], on_end=flush_user,
                                                       name="sums")
    sums.key_by(parity).reduce(count_rows, initial=int, name="by_parity").sink(es.ops.Collect(), name="reduced")
    ends = sums.process(collect_ends, state=list, kind="stateful", on_end=report, name="ends")
    ends.sink(es.ops.Collect(), name="ends_out")
    sums.union(ends, name="merged").sink(es.ops.Collect(), name="merged_out")

    want = local_outputs(flow)
    got = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, files_per_batch=1)

    assert got.outputs["reduced"] == want["reduced"]
    assert got.outputs["ends_out"] == want["ends_out"]
    assert Counter(got.outputs["merged_out"]) == Counter(want["merged_out"])
    assert len(want["reduced"]) >= 10 and want["ends_out"][-1][0] == "users"  # the flow did real work
    assert got.rows_in == 2 * ROWS_PER_FILE
    assert len(got.step_latencies_ms) == 3  # two files, one step each, then the end of stream
    assert got.latency_p50_ms is not None and got.latency_p50_ms > 0


def test_keyed_step_first_and_a_stateful_step_that_sees_nothing(spark, tmp_path):
    """A keyed step reading the source's dicts directly; on_end of a stateful step with no input still runs once."""
    flow = es.Flow("edges")
    notes = flow.source(es.ops.FromParquet(write_files(tmp_path, 2), columns=["user", "note"]), name="src") \
        .key_by(user_key).process(first_notes, state=list, on_end=flush_notes, name="notes")
    notes.sink(es.ops.Collect(), name="notes_out")
    notes.filter(never).process(count_all, state=int, kind="stateful", on_end=final_count, name="count") \
        .sink(es.ops.Collect(), name="count_out")

    want = local_outputs(flow)
    got = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, files_per_batch=2,
                            checkpoint_dir=tmp_path / "checkpoint")

    assert got.outputs == want
    assert want["count_out"] == [("count", 0)]
    assert (tmp_path / "checkpoint" / "checkpoint").is_dir()  # a given checkpoint folder is kept


def test_windowed_aggregates_equal_the_sequential_local_run(spark, tmp_path):
    """Tumbling counts and session sums per user (WindowAggregate is a KeyedProcess with on_end), and sliding
    counts closed by the watermark (a WindowAggregate of updates, then a stateful WatermarkCloser)."""
    flow = es.Flow("windows")
    clicks = flow.source(es.ops.FromParquet(write_files(tmp_path, 2)), name="src").map(project)
    clicks.key_by(user_of, partitions=4).window(es.ops.Tumbling(50.0), time=click_time).count(name="per_50s") \
        .sink(es.ops.Collect(), name="counts")
    clicks.key_by(user_of).window(es.ops.Session(30.0), time=click_time).aggregate(add_x, initial=int,
                                                                                     name="sessions") \
        .sink(es.ops.Collect(), name="sums")
    clicks.key_by(user_of, partitions=2).window(es.ops.Sliding(60.0, 20.0), time=click_time, close="watermark",
                                                lateness=10.0).count(name="sliding") \
        .sink(es.ops.Collect(), name="by_watermark")

    want = local_outputs(flow)
    got = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2)

    assert got.outputs == want
    assert sum(r.value for r in want["counts"]) == 2 * ROWS_PER_FILE and len(want["sums"]) > 5
    assert sum(r.value for r in want["by_watermark"]) == 3 * 2 * ROWS_PER_FILE  # 3 windows per tuple


def test_a_failing_function_names_its_operator(spark, tmp_path):
    flow = es.Flow("fails")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 2)), name="src").map(fails_on_x_13, name="boom") \
        .sink(es.ops.Collect(), name="out")
    with pytest.raises(OperatorError, match="x is 13") as info:
        run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, timeout_s=100)
    assert info.value.operator == "boom"


def test_a_failing_on_end_hook_names_its_operator(spark, tmp_path):
    # on_end runs in the last micro-batch, which carries the end row: the driver waits for that row last.
    flow = es.Flow("fails-at-end")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 1)), name="src").map(project) \
        .process(count_all, state=int, kind="stateful", on_end=fails_at_end, name="counter") \
        .sink(es.ops.Collect(), name="out")
    with pytest.raises(OperatorError, match="no end") as info:
        run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, timeout_s=100)
    assert info.value.operator == "counter"


# -- refused before Spark starts -----------------------------------------------------------------------------------

class Doubler(es.Operator):
    def __init__(self):
        super().__init__(inputs=1, outputs=1)

    async def process(self, ctx):
        port, out = ctx.inputs[0], ctx.outputs[0]
        while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
            await out.push(port.pop() * 2)


def test_a_coroutine_operator_is_refused_as_local_only(tmp_path):
    flow = es.Flow("coroutine")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 1)), name="src").then(Doubler(), name="doubler") \
        .sink(es.ops.Collect(), name="out")
    with pytest.raises(SparkTranslationError, match="'doubler'.*coroutine.*local-only") as info:
        run_flow_on_spark(flow)
    assert info.value.operator == "doubler"


def test_sources_other_than_one_parquet_stream_are_refused():
    flow = es.Flow("iterable")
    flow.source(range(3), name="numbers").sink(es.ops.Collect(), name="out")
    with pytest.raises(SparkTranslationError, match="'numbers'.*local-only"):
        plan_flow(flow)


def test_a_used_checkpoint_folder_is_refused(tmp_path):
    flow = es.Flow("checkpoint")
    flow.source(es.ops.FromParquet(write_files(tmp_path, 1)), name="src").sink(es.ops.Collect(), name="out")
    used = tmp_path / "used"
    used.mkdir()
    (used / "offsets").mkdir()
    with pytest.raises(FileExistsError, match="not empty"):
        run_flow_on_spark(flow, checkpoint_dir=used)


# -- order keys and key bytes --------------------------------------------------------------------------------------

def test_order_keys_sort_like_a_sequential_run():
    a, b = source_key(5), source_key(6)
    ordered = [a, child_key(a, 0), child_key(child_key(a, 0), 3), child_key(a, 1), b,
               end_key(2, a, 0), end_key(2, a, 1), end_key(2, child_key(a, 0), 0), end_key(2, b, 0),
               end_key(3, a, 0), end_key(3, end_key(2, a, 0), 0)]
    assert sorted(ordered) == ordered
    assert sorted([end_key(2, child_key(a, 0), 0), end_key(2, a, 7)]) == [end_key(2, a, 7),
                                                                           end_key(2, child_key(a, 0), 0)]


def test_equal_keys_group_alike():
    text = "".join(["us", "er"])  # equal to "user" but another object
    assert key_bytes(("user", "user")) == key_bytes(("user", text))
    assert key_bytes(1) == key_bytes(1.0) == key_bytes(True)
    assert key_bytes((1, "a")) != key_bytes((1, "b"))


# -- the translator reads specs, not classes -----------------------------------------------------------------------

TRANSLATOR = ("streaming", "order_keys", "failures", "plan", "layers", "frames", "feeding", "driver", "backend",
              "keygroup_state", "stream_steps", "run_folder")


def test_the_translator_imports_no_operator_class():
    import elastream.spark.streaming

    folder = Path(elastream.spark.streaming.__file__).parent
    imported = {(name, node.module) for name in TRANSLATOR
                for node in ast.walk(ast.parse((folder / f"{name}.py").read_text()))
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("elastream.ops")}
    assert imported == {("layers", "elastream.ops.arrow_rows")}  # rows_of: Arrow batches as dicts, no operator
