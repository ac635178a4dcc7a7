"""Contract: declarative flows from a Parquet input give the same outputs under every execution mode, Spark included.

Three small flows of declared operators (FromParquet → map / filter / flat_map;
``key_by().reduce()`` / ``key_by().process(state=list)`` / stateful process;
union → Collect) over two Parquet files (so Spark runs two micro-batches):
each mode's outputs equal a sequential reference computed here in plain Python,
in order (a union's output: each branch in order, the whole as a multiset). A
Spark run costs seconds, so the flows are few and small.

The step functions live at module level: Spark's workers and the process
modes' workers import or unpickle them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import elastream as es
from parquet_parts import write_user_amounts

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

FILES = 2
ROWS_PER_FILE = 40


@pytest.fixture
def parquet_files(tmp_path) -> list[Path]:
    """``FILES`` Parquet files of (user, amount), amount counting up across the files."""
    return write_user_amounts(tmp_path, FILES, ROWS_PER_FILE, users=5, step=7)


def rows() -> list[dict]:
    """The rows the Parquet files hold, in file order."""
    return [{"user": f"u{a * 7 % 5}", "amount": a} for a in range(FILES * ROWS_PER_FILE)]


# -- steps -------------------------------------------------------------------------------------------------------

def as_pair(row: dict) -> tuple[str, int]:
    return row["user"], row["amount"]


def not_multiple_of_3(pair: tuple[str, int]) -> bool:
    return pair[1] % 3 != 0


def with_half(pair: tuple[str, int]) -> list[tuple[str, int]]:
    """One or two outputs: the pair, and its half when the amount is even."""
    return [pair, (pair[0], pair[1] // 2)] if pair[1] % 2 == 0 else [pair]


def last_three(window: list, x):
    """One whole-stream window of the last three tuples, a list mutated in place."""
    window.append(x)
    if len(window) > 3:
        del window[0]
    return window, [tuple(window)]


def user_of(pair: tuple[str, int]) -> str:
    return pair[0]


def add_amount(total: int, pair: tuple[str, int]) -> int:
    return total + pair[1]


def append_total(seen: list, user_total: tuple[str, int]):
    """A per-key list mutated in place: how many totals the user has had, and the first one."""
    seen.append(user_total[1])
    return seen, [(user_total[0], len(seen), seen[0])]


def amount_only(row: dict) -> int:
    return row["amount"]


def negated(row: dict) -> int:
    return -row["amount"]


# -- flows and their sequential references -----------------------------------------------------------------------

def stateless(files: list[Path]) -> es.Flow:
    flow = es.Flow("stateless")
    flow.source(es.ops.FromParquet(files), name="src").map(as_pair, name="pairs") \
        .filter(not_multiple_of_3, name="keep").flat_map(with_half, name="halves").sink(es.ops.Collect(), name="out")
    return flow


def stateless_reference() -> list:
    return [p for pair in map(as_pair, rows()) if not_multiple_of_3(pair) for p in with_half(pair)]


def stateful(files: list[Path]) -> es.Flow:
    flow = es.Flow("stateful")
    flow.source(es.ops.FromParquet(files), name="src").map(as_pair, name="pairs") \
        .key_by(user_of).reduce(add_amount, initial=int, name="totals") \
        .key_by(user_of).process(append_total, state=list, name="history") \
        .process(last_three, state=list, name="window").sink(es.ops.Collect(), name="out")
    return flow


def stateful_reference() -> list:
    totals: dict[str, int] = {}
    history: dict[str, list] = {}
    window: list = []
    out = []
    for user, amount in map(as_pair, rows()):
        totals[user] = totals.get(user, 0) + amount
        history[user], emitted = append_total(history.get(user, []), (user, totals[user]))
        for h in emitted:
            window, last = last_three(window, h)
            out.extend(last)
    return out


def union(files: list[Path]) -> es.Flow:
    flow = es.Flow("union")
    src = flow.source(es.ops.FromParquet(files), name="src")
    src.map(amount_only, name="plain").union(src.map(negated, name="negated"), name="both") \
        .sink(es.ops.Collect(), name="out")
    return flow


FLOWS = {"stateless": (stateless, stateless_reference), "stateful": (stateful, stateful_reference)}


@pytest.mark.parametrize("flow_name", list(FLOWS))
def test_outputs_equal_the_sequential_reference_in_every_mode(flow_name, execution_mode, parquet_files):
    make, reference = FLOWS[flow_name]
    flow = make(parquet_files)
    # Declared operators only: the Spark mode must run it too, not skip it.
    assert execution_mode.supports(flow), execution_mode.unsupported(flow)
    result = execution_mode.run(flow)
    assert result.outputs["out"] == reference()


def test_union_keeps_each_branch_in_order_in_every_mode(execution_mode, parquet_files):
    flow = union(parquet_files)
    assert execution_mode.supports(flow), execution_mode.unsupported(flow)
    out = execution_mode.run(flow).outputs["out"]
    amounts = [row["amount"] for row in rows()]
    assert Counter(out) == Counter(amounts + [-a for a in amounts])
    assert [x for x in out if x > 0] == [a for a in amounts if a > 0]
    assert [x for x in out if x < 0] == [-a for a in amounts if a > 0]
