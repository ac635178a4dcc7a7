"""Misusing sources, file sinks and the command line fails at once with a way out (issue 19, items 3 and 7).

* the file sinks take dicts, dataclasses, named tuples (the engine's own ``WindowResult``) and tuples
  given ``columns``; a record they cannot write fails when it arrives, naming the sink, the record and
  what is accepted, and what the sink accepted before it stays in the file;
* ``flow.source("text.txt")`` is refused instead of streaming the string's characters;
* ``elastream placement module:function`` finds a module in the current folder, and says what it
  tried when it cannot;
* ``elastream demo --barrier`` reports what its sources emitted and a workers column a user can read.
"""

from __future__ import annotations

import csv
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pyarrow.parquet as pq
import pytest

import elastream as es

CAP = 200_000


@dataclass(frozen=True)
class Click:
    user: str
    ts: float


class Pair(NamedTuple):
    left: int
    right: str


def clicks() -> list[Click]:
    return [Click("a", 0.0), Click("b", 5.0), Click("a", 10.0), Click("a", 5000.0), Click("b", 9000.0)]


def sessions_flow(sink: es.Operator) -> es.Flow:
    flow = es.Flow("sessions")
    flow.source(es.ops.FromIterable(clicks()), name="clicks").key_by(lambda c: c.user) \
        .window(es.ops.Session(1800.0), time=lambda c: c.ts) \
        .aggregate(lambda acc, c: acc + [c.ts], initial=list, name="sessions").sink(sink, name="out")
    return flow


def endless_flow(records: list, sink: es.Operator) -> es.Flow:
    """``records``, then more of the last one: a sink that waited for close() to check would meet the cap."""
    def generate():
        for i in itertools.count():
            if i == CAP:
                raise AssertionError("the sink did not refuse the first record when it arrived")
            yield records[min(i, len(records) - 1)]

    flow = es.Flow("endless")
    flow.source(es.ops.FromGenerator(generate), name="records").sink(sink, name="out")
    return flow


def expected_sessions() -> list[dict]:
    return [{"key": "a", "start": 0.0, "end": 1810.0, "value": [0.0, 10.0]},
            {"key": "b", "start": 5.0, "end": 1805.0, "value": [5.0]},
            {"key": "a", "start": 5000.0, "end": 6800.0, "value": [5000.0]},
            {"key": "b", "start": 9000.0, "end": 10800.0, "value": [9000.0]}]


def by_key_start(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["start"], r["key"]))


# -- item 3: the file sinks ------------------------------------------------------------------------

def test_parquet_sink_writes_window_results_with_their_field_names(tmp_path: Path):
    path = tmp_path / "s.parquet"
    result = es.Runner().run(sessions_flow(es.ops.ToParquet(path)))
    assert result.outputs["out"].rows == 4
    table = pq.read_table(path)
    assert table.column_names == ["key", "start", "end", "value"]
    assert by_key_start(table.to_pylist()) == by_key_start(expected_sessions())


def test_jsonl_sink_writes_window_results_as_objects(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    es.Runner().run(sessions_flow(es.ops.ToJSONL(path)))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert by_key_start(rows) == by_key_start(expected_sessions())


@pytest.mark.parametrize("sink_type", ["csv", "jsonl", "parquet"])
def test_file_sinks_take_dataclasses_named_tuples_and_tuples_with_columns(tmp_path: Path, sink_type: str):
    cases = {"dataclass": ([Click("a", 1.0), Click("b", 2.0)], None, ["user", "ts"]),
             "named tuple": ([Pair(1, "x"), Pair(2, "y")], None, ["left", "right"]),
             "tuple": ([(1, "x"), [2, "y"]], ["n", "s"], ["n", "s"])}
    sink_class = {"csv": es.ops.ToCSV, "jsonl": es.ops.ToJSONL, "parquet": es.ops.ToParquet}[sink_type]
    for kind, (records, columns, names) in cases.items():
        path = tmp_path / f"{kind}.{sink_type}"
        flow = es.Flow("records")
        flow.source(es.ops.FromIterable(records), name="records").sink(sink_class(path, columns=columns), name="out")
        assert es.Runner().run(flow).outputs["out"].rows == 2
        assert read_back(path, sink_type) == [dict(zip(names, map(str, fields_of(r)))) for r in records], kind


def fields_of(record) -> list:
    return [getattr(record, f) for f in ("user", "ts")] if isinstance(record, Click) else list(record)


def read_back(path: Path, sink_type: str) -> list[dict]:
    """Rows as dicts of strings (CSV holds nothing else)."""
    if sink_type == "csv":
        rows = list(csv.DictReader(path.open(newline="")))
    elif sink_type == "jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    else:
        rows = pq.read_table(path).to_pylist()
    return [{k: str(v) for k, v in row.items()} for row in rows]


def test_parquet_sink_refuses_plain_tuples_without_columns_at_the_first_record(tmp_path: Path):
    path = tmp_path / "t.parquet"
    with pytest.raises(es.OperatorError) as info:
        es.Runner().run(endless_flow([(1, "x")], es.ops.ToParquet(path)))
    error = info.value
    assert error.operator == "out" and isinstance(error.cause, TypeError)
    message = str(error)
    assert "record 1 (1, 'x') is a tuple and Parquet needs column names" in message
    assert "columns=[...]" in message and "dataclasses or named tuples" in message
    assert pq.read_table(path).num_rows == 0  # a valid, empty file


@pytest.mark.parametrize("sink_type", ["csv", "parquet"])
def test_sinks_refuse_a_record_they_cannot_write_naming_what_they_accept(tmp_path: Path, sink_type: str):
    sink = {"csv": es.ops.ToCSV, "parquet": es.ops.ToParquet}[sink_type](tmp_path / f"w.{sink_type}")
    with pytest.raises(es.OperatorError) as info:
        es.Runner().run(endless_flow(["just words"], sink))
    assert info.value.operator == "out"
    message = str(info.value)
    assert "record 1 'just words' is a str; the records must be dicts, dataclasses, named tuples" in message
    assert "tuples and lists together with columns=[...]" in message


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


def test_parquet_sink_refuses_a_first_record_arrow_cannot_hold(tmp_path: Path):
    with pytest.raises(es.OperatorError, match=r"record 1 \{'a': Opaque\(\)\} cannot be written to Parquet"):
        es.Runner().run(endless_flow([{"a": Opaque()}], es.ops.ToParquet(tmp_path / "opaque.parquet")))


@pytest.mark.parametrize("sink_type", ["csv", "parquet"])
def test_a_record_unlike_the_first_fails_and_keeps_the_records_before_it(tmp_path: Path, sink_type: str):
    # (ToJSONL writes each record as what it is: its lines need not share a shape.)
    path = tmp_path / f"mixed.{sink_type}"
    sink = {"csv": es.ops.ToCSV, "parquet": es.ops.ToParquet}[sink_type](path)
    records = [Click("a", float(i)) for i in range(5)] + [Pair(1, "x")]
    with pytest.raises(es.OperatorError, match="record 6 Pair.* is a Pair, but this file holds Click records"):
        es.Runner().run(endless_flow(records, sink))
    assert read_back(path, sink_type) == [{"user": "a", "ts": str(float(i))} for i in range(5)]


def test_columns_naming_a_missing_field_fail_at_once(tmp_path: Path):
    sink = es.ops.ToCSV(tmp_path / "c.csv", columns=["user", "page"])
    missing = r"record 1 Click.* has no fields \['page'\] \(a Click: \['user', 'ts'\]\)"
    with pytest.raises(es.OperatorError, match=missing):
        es.Runner().run(endless_flow([Click("a", 1.0)], sink))


def test_columns_order_the_fields_of_dicts_too(tmp_path: Path):
    path = tmp_path / "ordered.jsonl"
    flow = es.Flow("ordered")
    flow.source(es.ops.FromIterable([{"b": 1, "a": 2}]), name="records") \
        .sink(es.ops.ToJSONL(path, columns=["a", "b"]), name="out")
    es.Runner().run(flow)
    assert path.read_text() == '{"a": 2, "b": 1}\n'


# -- item 7: a string as a source ------------------------------------------------------------------

@pytest.mark.parametrize("text", ["text.txt", b"text.txt"])
def test_a_string_source_is_refused_with_the_operators_that_read_files(text):
    with pytest.raises(TypeError) as info:
        es.Flow("text").source(text)
    message = str(info.value)
    assert f"flow.source({text!r}): a {type(text).__name__} is not a stream of records" in message
    assert f"es.ops.TextLines({text!r})" in message and f"es.ops.FromIterable([{text!r}])" in message


def test_a_path_source_is_refused_with_the_operators_that_read_files():
    with pytest.raises(TypeError, match=r"flow.source\('data/text.txt'\): a path is not a stream of records"):
        es.Flow("text").source(Path("data/text.txt"))


# -- item 7: the command line ----------------------------------------------------------------------

FLOW_MODULE = '''
import elastream as es
from {helper} import double


def make():
    flow = es.Flow("mine")
    flow.source(es.ops.FromIterable(range(5)), name="numbers").map(double, name="double").collect(name="out")
    return flow
'''


def test_placement_finds_a_module_in_the_current_folder(tmp_path: Path, monkeypatch, capsys):
    from elastream.cli.main import main

    (tmp_path / "misuse_myflow.py").write_text(FLOW_MODULE.format(helper="misuse_helper"))
    (tmp_path / "misuse_helper.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    for name in ("misuse_myflow", "misuse_helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["placement", "misuse_myflow:make", "--processes", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["flow"] == "mine" and set(report["plan"]["assignment"]) == {"numbers", "double", "out"}
    assert str(tmp_path) not in sys.path  # the folder was on the path only for the lookup


def test_placement_says_where_it_looked_for_a_missing_module(tmp_path: Path, monkeypatch, capsys):
    from elastream.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["placement", "misuse_nowhere:make"]) == 2
    err = capsys.readouterr().err
    assert f"no module 'misuse_nowhere': looked in the current folder ({tmp_path}) and on Python's path" in err
    assert "path/to/misuse_nowhere.py:make" in err


def test_placement_names_the_module_a_flow_module_failed_to_import(tmp_path: Path, monkeypatch, capsys):
    from elastream.cli.main import main

    (tmp_path / "misuse_broken.py").write_text(FLOW_MODULE.format(helper="misuse_absent_dependency"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "misuse_broken", raising=False)
    assert main(["placement", "misuse_broken:make"]) == 2
    assert "importing 'misuse_broken' failed: No module named 'misuse_absent_dependency'" in capsys.readouterr().err


def column(table, header: str) -> list[str]:
    return list(next(c for c in table.columns if c.header == header).cells)


def test_demo_tables_show_what_sources_emit_and_workers_a_user_can_read():
    from elastream.cli.tables import live_table, operator_table

    flow = es.Flow("counts")
    flow.source(es.ops.FromIterable(range(1000)), name="numbers").map(lambda x: x + 1, name="plus") \
        .sink(es.ops.Collect(), name="out")
    stats = es.Runner(threads=2).run(flow).stats
    table = operator_table(stats)
    assert column(table, "operator") == ["numbers", "plus", "out"]
    assert column(table, "tuples in") == ["-", "1,000", "1,000"]  # a source takes nothing in: it emits
    assert column(table, "tuples out") == ["1,000", "1,000", "-"]
    live = live_table(stats)
    assert column(live, "workers now") == ["-", "-", "-"]  # nothing runs an operator of a finished flow
    assert column(live, "most at once")[0] == "1" and column(live, "tuples in")[0] == "-"

