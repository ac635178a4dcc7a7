"""Error policies end to end: malformed records under fail / skip / dead_letter,
dead-letter wiring checked at build time, and sinks that keep what they accepted
when the flow stops on an error.

Each test writes real files under tmp_path and runs a real flow.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.ops import DeadLetter

pytestmark = pytest.mark.timeout(60)

GOOD_ROWS = 3000


@dataclass
class BadFile:
    """A file with malformed records at known lines, and the records it should yield."""

    path: Path
    good: list[dict]
    bad_lines: list[int]
    reasons: list[str]
    raws: list[str]

    def source(self, on_error: str) -> es.Operator:
        if self.path.suffix == ".csv":
            return es.ops.FromCSV(self.path, types={"id": int}, on_error=on_error)
        return es.ops.FromJSONL(self.path, on_error=on_error)


# What each kind of malformed record looks like, and the reason it must get.
# A too-few row ("17") would convert cleanly if the field count were not checked, so
# emitting it as {"id": 17} instead of rejecting it fails every policy's test.
CSV_BAD = {"too_many_fields": ("17,x,extra", "expected 2 fields, got 3"),
           "bad_int": ("seven,x", "column 'id': int('seven') failed"),
           "too_few_fields": ("17", "expected 2 fields, got 1")}
JSONL_BAD = {"bad_json": ('{"id": 1,', "invalid JSON"),
             "non_object": ("[1, 2, 3]", "expected a JSON object, got array")}


def make_csv(tmp_path: Path, kinds: list[str], every: int = 401) -> BadFile:
    """GOOD_ROWS rows, with a bad row of each kind in turn after every ``every`` good ones.

    A quoted field spanning two physical lines comes first, so record numbers
    and line numbers differ, as they do in real files.
    """
    path = tmp_path / "in.csv"
    lines = ["id,name"]
    good, bad_lines, reasons, raws = [], [], [], []
    lines.append('-1,"two\nlines"')
    good.append({"id": -1, "name": "two\nlines"})
    line_no = 4  # header on line 1, the two-line record on lines 2-3
    for i in range(GOOD_ROWS):
        if i and i % every == 0:
            text, reason = CSV_BAD[kinds[len(bad_lines) % len(kinds)]]
            lines.append(text)
            bad_lines.append(line_no)
            reasons.append(reason)
            raws.append(text)
            line_no += 1
        lines.append(f"{i},name {i}")
        good.append({"id": i, "name": f"name {i}"})
        line_no += 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return BadFile(path, good, bad_lines, reasons, raws)


def make_jsonl(tmp_path: Path, kinds: list[str], every: int = 401) -> BadFile:
    """Like :func:`make_csv`, with blank lines (skipped silently) among the records."""
    path = tmp_path / "in.jsonl"
    lines, good, bad_lines, reasons, raws = [], [], [], [], []
    for i in range(GOOD_ROWS):
        if i and i % every == 0:
            text, reason = JSONL_BAD[kinds[len(bad_lines) % len(kinds)]]
            lines.append(text)
            bad_lines.append(len(lines))
            reasons.append(reason)
            raws.append(text)
        if i % 500 == 250:
            lines.append("   ")
        lines.append(json.dumps({"id": i, "name": f"name {i}"}))
        good.append({"id": i, "name": f"name {i}"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return BadFile(path, good, bad_lines, reasons, raws)


def make_bad_file(tmp_path: Path, fmt: str, kinds: list[str] | None = None) -> BadFile:
    if fmt == "csv":
        return make_csv(tmp_path, kinds or list(CSV_BAD))
    return make_jsonl(tmp_path, kinds or list(JSONL_BAD))


def source_flow(src_op: es.Operator, dead_letters: bool = False) -> es.Flow:
    flow = es.Flow("policies")
    src = flow.add(src_op, name="src")
    src >> flow.add(es.ops.Collect(), name="out")
    if dead_letters:
        flow.connect(src.out(1), flow.add(es.ops.Collect(), name="dead").in_(0))
    return flow


# -- fail ------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt, kind", [("csv", k) for k in CSV_BAD] + [("jsonl", k) for k in JSONL_BAD])
def test_fail_raises_naming_file_line_and_reason(tmp_path: Path, fmt: str, kind: str, threads: int):
    bad = make_bad_file(tmp_path, fmt, [kind])
    first = bad.bad_lines[0]
    with pytest.raises(es.OperatorError) as info:
        es.Runner(threads=threads).run(source_flow(bad.source("fail")), timeout=30)
    error = info.value
    message = str(error)
    assert error.operator == "src"
    assert f"{bad.path}:{first}:" in message and bad.reasons[0] in message
    cause = error.__cause__
    assert isinstance(cause, es.RecordError)
    assert (cause.path, cause.line) == (str(bad.path), first)
    assert bad.reasons[0] in cause.reason


# -- skip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_skip_keeps_good_records_in_order_and_counts_bad_ones(tmp_path: Path, fmt: str, threads: int):
    bad = make_bad_file(tmp_path, fmt)
    assert len(bad.bad_lines) >= 6
    result = es.Runner(threads=threads).run(source_flow(bad.source("skip")), timeout=30)
    assert result.outputs["out"] == bad.good
    assert result.stats.operators["src"].malformed == len(bad.bad_lines)


def test_skip_survives_a_file_of_only_bad_records(tmp_path: Path):
    path = tmp_path / "junk.jsonl"
    path.write_text("not json\n" * 2000, encoding="utf-8")
    result = es.Runner(threads=1).run(source_flow(es.ops.FromJSONL(path, on_error="skip")), timeout=30)
    assert result.outputs["out"] == []
    assert result.stats.operators["src"].malformed == 2000


# -- dead_letter -----------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_dead_letter_routes_bad_records_to_port_1(tmp_path: Path, fmt: str, threads: int):
    bad = make_bad_file(tmp_path, fmt)
    flow = source_flow(bad.source("dead_letter"), dead_letters=True)
    result = es.Runner(threads=threads).run(flow, timeout=30)
    assert result.outputs["out"] == bad.good
    letters = result.outputs["dead"]
    assert all(type(d) is DeadLetter for d in letters)
    assert [d.line for d in letters] == bad.bad_lines
    assert [d.raw for d in letters] == bad.raws
    assert all(d.path == str(bad.path) for d in letters)
    for letter, reason in zip(letters, bad.reasons):
        assert reason in letter.reason
    assert result.stats.operators["src"].malformed == 0


def test_dead_letters_of_the_last_batch_are_not_lost(tmp_path: Path):
    # The final read reaches the end of the file holding only dead letters.
    path = tmp_path / "tail.jsonl"
    path.write_text('{"a": 1}\n' + "oops\n" * 3, encoding="utf-8")
    flow = source_flow(es.ops.FromJSONL(path, on_error="dead_letter"), dead_letters=True)
    result = es.Runner(threads=1).run(flow, timeout=30)
    assert result.outputs["out"] == [{"a": 1}]
    assert [d.line for d in result.outputs["dead"]] == [2, 3, 4]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_unconnected_dead_letter_port_fails_validation(tmp_path: Path, fmt: str):
    bad = make_bad_file(tmp_path, fmt)
    flow = source_flow(bad.source("dead_letter"))
    with pytest.raises(es.FlowValidationError) as info:
        flow.validate()
    assert info.value.operator == "src" and info.value.port == "out(1)"
    assert "'src'" in str(info.value)
    with pytest.raises(es.FlowValidationError):
        es.Runner(threads=1).run(flow, timeout=30)


# -- sinks keep what they accepted ---------------------------------------------------------------

SINKS = {
    "csv": (lambda p: es.ops.ToCSV(p), lambda p: [int(r["i"]) for r in csv.DictReader(open(p, newline=""))]),
    "jsonl": (lambda p: es.ops.ToJSONL(p), lambda p: [json.loads(s)["i"] for s in p.read_text().splitlines()]),
    # A row group far larger than the stream: everything is still in memory when the flow fails.
    "parquet": (lambda p: es.ops.ToParquet(p, row_group_rows=1_000_000),
                lambda p: pq.read_table(p).column("i").to_pylist()),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt", list(SINKS))
def test_sink_downstream_of_failing_operator_flushes_accepted_rows(tmp_path: Path, fmt: str, threads: int):
    make_sink, read_back = SINKS[fmt]
    path = tmp_path / f"out.{fmt}"

    def explode_late(x: int) -> dict:
        if x == 15_000:
            raise RuntimeError("boom at 15000")
        return {"i": x}

    flow = es.Flow("flush")
    src = flow.add(es.ops.FromIterable(range(20_000)), name="src")
    boom = flow.add(es.ops.Map(explode_late), name="boom")
    sink_op = make_sink(path)
    sink = flow.add(sink_op, name="sink")
    src >> boom >> sink
    # Small queues: the sink must have accepted batches long before the failure.
    with pytest.raises(es.OperatorError, match="boom at 15000") as info:
        es.Runner(threads=threads, max_queue_size=64).run(flow, timeout=30)
    assert info.value.operator == "boom"
    # The run worked on its own instance of the sink: what it accepted is in the error's partial result.
    accepted = info.value.partial.outputs["sink"].rows
    assert 0 < accepted <= 15_000
    assert read_back(path) == list(range(accepted))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_sink_behind_failing_source_keeps_a_prefix_of_good_records(tmp_path: Path, fmt: str):
    bad = make_bad_file(tmp_path, fmt, [next(iter(CSV_BAD if fmt == "csv" else JSONL_BAD))])
    out = tmp_path / "out.jsonl"
    sink_op = es.ops.ToJSONL(out)
    flow = es.Flow("prefix")
    flow.add(bad.source("fail"), name="src") >> flow.add(sink_op, name="sink")
    with pytest.raises(es.OperatorError) as info:
        es.Runner(threads=2, max_queue_size=64).run(flow, timeout=30)
    written = [json.loads(s) for s in out.read_text().splitlines()]
    assert written == bad.good[:len(written)] and len(written) == info.value.partial.outputs["sink"].rows
