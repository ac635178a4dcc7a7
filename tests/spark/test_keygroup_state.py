"""Key-group state in the Spark translation (elastream.spark.keygroup_state), micro-batch sizing, and resuming.

Without Spark:

* a keyed step's rows get the key group the local engine computes
  (``elastream.operators.keygroups``) for ints, floats, strings, tuples, numpy ints;
* one call of a key group steps many keys' rows in order-key order whatever
  order they arrive in, keeps every key's state across micro-batches in one
  value, and flushes every key's ``on_end`` once when the group's end copy
  arrives (after stepping the rows that came with it);
* the stream is cut into steps of whole files or of a number of rows (across
  files and row groups), and a cut keeps the stream order.

On Spark:

* a flow with thousands of keys (keyed process with on_end, keyed reduce, a
  stateful step after them) gives the sequential local run's outputs, in
  steps of rows;
* a query that fails mid-stream and runs again on the same checkpoint folder
  resumes and gives the local run's outputs; a folder of another run is refused.

The step functions live at module level: Spark's workers import this module.
"""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.errors import OperatorError
from elastream.operators.keygroups import key_group
from elastream.spark.keygroup_state import KeyGroupCall
from elastream.spark.order_keys import END_KEY, child_key, dumps, end_key, loads, marker_key, source_key
from elastream.spark.plan import KeyedStep, KeySpec, plan_flow
from elastream.spark.stream_steps import SLICE_STRIDE, StreamSteps
from elastream.spark.streaming import run_flow_on_spark

KEYS = 1_500


def write_clicks(folder: Path, n_files: int, rows: int, row_group: int | None = None) -> list[Path]:
    """``n_files`` files of ``rows`` clicks (user, x): x counts up across files, users spread over KEYS keys."""
    files = []
    for i in range(n_files):
        xs = list(range(i * rows, (i + 1) * rows))
        path = folder / f"clicks-{i:02d}.parquet"
        pq.write_table(pa.table({"user": pa.array([x * 7919 % KEYS for x in xs], pa.int64()),
                                 "x": pa.array(xs, pa.int64())}), path, row_group_size=row_group)
        files.append(path)
    return files


# -- step functions (module level: pickled by reference, imported by the workers) ---------------------------------

def user_of(row: dict) -> int:
    return row["user"]


def count_and_sum(state: list, row: dict) -> tuple[list, list]:
    state[0] += 1
    state[1] += row["x"]
    return state, [(row["user"], state[0])] if state[0] % 2 == 0 else []


def totals(user: int, state: list) -> list:
    return [(user, "total", state[0], state[1])]


def add_x(total: int, row: dict) -> int:
    return total + row["x"]


def last_seen(seen: dict, out: tuple) -> tuple[dict, list]:
    seen[out[0]] = out
    return seen, []


def report_seen(seen: dict) -> list:
    return [("users at the end", len(seen))]


def fails_once(flag: str, row: dict) -> dict:
    """Fails the first time it meets x == 700 (the flag file remembers, across Spark's worker processes)."""
    marker = Path(flag)
    if row["x"] == 700 and not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError("worker lost at x 700")
    return row


def many_keys_flow(files: list[Path], first=None) -> es.Flow:
    """source → [first] → key_by(user).process(on_end) → stateful; key_by(user, 16 partitions).reduce → sink."""
    flow = es.Flow("many-keys")
    clicks = flow.source(es.ops.FromParquet(files), name="src")
    if first is not None:
        clicks = clicks.map(first, name="first")
    counts = clicks.key_by(user_of).process(count_and_sum, state=lambda: [0, 0], on_end=totals, name="counts")
    counts.sink(es.ops.Collect(), name="counts_out")
    counts.process(last_seen, state=dict, kind="stateful", on_end=report_seen, name="seen") \
        .sink(es.ops.Collect(), name="seen_out")
    clicks.key_by(user_of, partitions=16).reduce(add_x, initial=int, name="sums") \
        .sink(es.ops.Collect(), name="sums_out")
    return flow


# -- without Spark -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [0, 5, 130, -7, 2**40, 1.0, 2.5, True, "user-17", "", ("a", 3), (1, (2, "b")),
                                 np.int64(130)])
def test_key_groups_are_the_local_engines(key):
    for groups in (8, 9, 128):
        assert KeySpec("op", lambda item: item, groups).group_of(key) == key_group(key, groups)
    assert KeySpec("op", None).group_of(key) == 0  # a stateful step is one group


def test_the_plan_uses_each_operators_declared_key_groups(tmp_path):
    plan = plan_flow(many_keys_flow(write_clicks(tmp_path, 1, 4)))
    groups = {s.name: s.groups for s in plan.keyed.values()}
    assert groups == {"counts": 128, "seen": 1, "sums": 16}
    assert {r.name: r.key.groups for r in plan.routes if r.key is not None} == groups


class FakeGroupState:
    """Spark's GroupState as a KeyGroupCall uses it (one binary value, no timeout)."""

    def __init__(self, value=None):
        self.value = value

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value):
        self.value = value

    def remove(self):
        self.value = None


def frames_of(rows: list[tuple[bytes, object]], chunk: int = 7) -> list[pd.DataFrame]:
    frame = pd.DataFrame({"k": [k for k, _ in rows], "v": [dumps(v) for _, v in rows]})
    return [frame.iloc[i:i + chunk] for i in range(0, len(frame), chunk)]


COUNTS = KeyedStep("counts", 3, user_of, count_and_sum, lambda: [0, 0], totals, groups=4)


def test_one_call_steps_every_key_of_its_group_in_order_and_keeps_their_state():
    rows = [(source_key(x), {"user": x % 50, "x": x}) for x in range(400)]
    state = FakeGroupState()

    first_batch = rows[:200]
    random.Random(3).shuffle(first_batch)  # a group's rows reach it in any order: the call sorts them
    first = KeyGroupCall(COUNTS, state).run(iter(frames_of(first_batch)))
    second = KeyGroupCall(COUNTS, state).run(iter(frames_of(list(reversed(rows[200:])))))

    # the same outputs as one sequential loop over the rows (each key's rows in stream order)
    want, kept = [], {}
    for k, row in rows:
        st = kept.setdefault(row["user"], [0, 0])
        _, emitted = count_and_sum(st, row)
        want.extend((child_key(k, j), e) for j, e in enumerate(emitted))
    assert first + second == want and len(want) == 200  # in order: one key group, stepped in stream order
    keys = loads(state.value[0])
    assert len(keys) == 50 and keys[7][1:] == [7, [8, sum(range(7, 400, 50))]]


def test_the_end_of_stream_flushes_every_key_of_the_group_once():
    rows = [(source_key(x), {"user": x % 30, "x": x}) for x in range(90)]
    state = FakeGroupState()
    KeyGroupCall(COUNTS, state).run(iter(frames_of(rows)))

    flushed = KeyGroupCall(COUNTS, state).run(iter(frames_of([(END_KEY, None)])))  # the group's end copy

    assert sorted(flushed) == sorted((end_key(3, source_key(u), 0), (u, "total", 3, 3 * u + 90)) for u in range(30))
    assert state.value is None  # the group left the state store: no key flushes twice


def test_rows_that_come_with_the_end_are_stepped_then_flushed_at_once():
    state = FakeGroupState()
    rows = [(source_key(1), {"user": 4, "x": 1}), (END_KEY, None), (source_key(2), {"user": 4, "x": 2})]
    out = KeyGroupCall(COUNTS, state).run(iter(frames_of(rows)))
    assert out == [(child_key(source_key(2), 0), (4, 2)), (end_key(3, source_key(1), 0), (4, "total", 2, 3))]
    assert state.value is None


def test_a_reduce_step_skips_control_rows_and_leaves_the_store_at_the_end():
    sums = KeyedStep("sums", 4, user_of, add_x, int, None, reduce=True, groups=4)
    state = FakeGroupState()
    rows = [(marker_key(1), None), (source_key(1), {"user": 4, "x": 5}), (source_key(2), {"user": 4, "x": 6})]
    assert KeyGroupCall(sums, state).run(iter(frames_of(rows))) == [(source_key(1), (4, 5)), (source_key(2), (4, 11))]
    assert KeyGroupCall(sums, state).run(iter(frames_of([(END_KEY, None)]))) == [] and state.value is None


def test_a_stateful_step_exists_from_its_first_control_row():
    step = KeyedStep("seen", 5, None, last_seen, dict, report_seen)
    state = FakeGroupState()
    assert KeyGroupCall(step, state).run(iter(frames_of([(marker_key(1), None)]))) == []
    assert KeyGroupCall(step, state).run(iter(frames_of([(END_KEY, None)]))) == [(end_key(5, b"", 0),
                                                                                   ("users at the end", 0))]
    assert KeyGroupCall(step, FakeGroupState()).run(iter(frames_of([(END_KEY, None)]))) == [
        (end_key(5, b"", 0), ("users at the end", 0))]  # only the end reached it: it exists, and flushes


def test_steps_of_rows_cross_files_and_row_groups_in_order(tmp_path):
    files = write_clicks(tmp_path, 3, 25, row_group=10)
    steps = StreamSteps.plan(files, ["x"], rows_per_batch=20)
    steps.use_slices(4)  # 20 rows are fewer than a slice's minimum: one file per step
    assert (len(steps), steps.slices, steps.rows_before(2), steps.rows_before(9)) == (4, 1, 40, 75)
    seen = []
    for i in range(len(steps)):
        folder = tmp_path / f"step{i}"
        folder.mkdir()
        steps.put(i, folder)
        [path] = sorted(folder.iterdir())
        assert path.name == f"d{i * SLICE_STRIDE:09d}.parquet"
        seen += pq.read_table(path).column("x").to_pylist()
    assert seen == list(range(75))


def test_steps_of_files_link_them_and_both_sizes_are_refused(tmp_path):
    files = write_clicks(tmp_path, 3, 5)
    steps = StreamSteps.plan(files, None, files_per_batch=2)
    assert (len(steps), steps.rows_before(1), steps.rows_before(2)) == (2, 10, 15)
    folder = tmp_path / "step"
    folder.mkdir()
    steps.put(1, folder)
    assert [p.name for p in folder.iterdir()] == ["d000000002.parquet"]
    with pytest.raises(ValueError, match="not both"):
        StreamSteps.plan(files, None, files_per_batch=1, rows_per_batch=10)
    with pytest.raises(ValueError, match="rows_per_batch must be >= 1"):
        StreamSteps.plan(files, None, rows_per_batch=0)


# -- on Spark ------------------------------------------------------------------------------------------------------

@pytest.mark.spark
def test_thousands_of_keys_in_steps_of_rows_equal_the_sequential_run(spark, tmp_path):
    flow = many_keys_flow(write_clicks(tmp_path, 2, 2_000))
    want = es.Runner(threads=1).run(flow).outputs

    got = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, rows_per_batch=1_500)

    assert got.outputs == want
    assert len(want["counts_out"]) == 2 * KEYS and want["seen_out"] == [("users at the end", KEYS)]
    assert got.rows_in == 4_000 and len(got.step_latencies_ms) == 3 + 1  # ceil(4000 / 1500) steps, then the end


@pytest.mark.spark
def test_a_run_that_failed_mid_stream_resumes_on_its_checkpoint(spark, tmp_path):
    files = write_clicks(tmp_path, 4, 250)
    flow = many_keys_flow(files, first=partial(fails_once, str(tmp_path / "failed")))
    want = es.Runner(threads=1).run(many_keys_flow(files)).outputs
    checkpoint = tmp_path / "run"

    with pytest.raises(OperatorError, match="worker lost at x 700") as info:
        run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, files_per_batch=1, checkpoint_dir=checkpoint,
                          timeout_s=100)
    assert info.value.operator == "first"
    resumed = run_flow_on_spark(flow, spark=spark, shuffle_partitions=2, files_per_batch=1,
                                checkpoint_dir=checkpoint, timeout_s=100)

    assert resumed.outputs == want
    assert resumed.resumed_steps == 4  # the warm-up and files 1-3 were fed before the failure (x 700 is in file 3)
    assert resumed.rows_in == 1_000
    with pytest.raises(ValueError, match="another run .*rows_per_batch"):
        run_flow_on_spark(flow, spark=spark, rows_per_batch=100, checkpoint_dir=checkpoint)
