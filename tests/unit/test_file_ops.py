"""File sources and sinks: round trips through real files, formats and edge cases.

Error policies of the record sources are covered in
tests/integration/test_error_policies.py.
"""

from __future__ import annotations

import csv
import doctest
import json
import math
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.ops import DeadLetter, ErrorPolicy, WrittenFile

pytestmark = pytest.mark.timeout(60)

ROWS = 5000  # with the default batch of 256 tuples, about 20 batches flow


def run(flow: es.Flow, threads: int = 1, **kw) -> es.RunResult:
    return es.Runner(threads=threads, **kw).run(flow, timeout=30)


def pipe(source: es.Operator, sink: es.Operator, name: str = "pipe") -> es.Flow:
    flow = es.Flow(name)
    src = flow.add(source, name="src")
    out = flow.add(sink, name="out")
    src >> out
    return flow


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# -- round trips -----------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
def test_csv_round_trip_keeps_order_and_content(tmp_path: Path, threads: int):
    src_path, out_path = tmp_path / "in.csv", tmp_path / "out.csv"
    with open(src_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "score"])
        for i in range(ROWS):
            # Quotes, delimiters and newlines inside fields must survive the trip.
            name = f'n{i}, "q"\nx' if i % 997 == 0 else f"name-{i}-é"
            w.writerow([i, name, repr(i / 4)])
    flow = pipe(es.ops.FromCSV(src_path, types={"id": int, "score": float}), es.ops.ToCSV(out_path))
    result = run(flow, threads)
    assert result.outputs["out"] == WrittenFile(str(out_path), ROWS)
    assert out_path.read_bytes() == src_path.read_bytes()


@pytest.mark.parametrize("threads", [1, 2])
def test_csv_records_are_typed_dicts_in_file_order(tmp_path: Path, threads: int):
    path = tmp_path / "in.csv"
    path.write_text("a,b\n" + "".join(f"{i},{i * 0.5}\n" for i in range(ROWS)), encoding="utf-8")
    flow = pipe(es.ops.FromCSV(path, types={"a": int, "b": float}), es.ops.Collect())
    assert run(flow, threads).outputs["out"] == [{"a": i, "b": i * 0.5} for i in range(ROWS)]


@pytest.mark.parametrize("threads", [1, 2])
def test_jsonl_round_trip_keeps_order_and_content(tmp_path: Path, threads: int):
    src_path, out_path = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    records = [{"id": i, "tags": ["x", "ü"] * (i % 3), "nested": {"v": i / 3, "none": None}, "ok": i % 2 == 0}
               for i in range(ROWS)]
    src_path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    flow = pipe(es.ops.FromJSONL(src_path), es.ops.ToJSONL(out_path))
    result = run(flow, threads)
    assert result.outputs["out"] == WrittenFile(str(out_path), ROWS)
    assert [json.loads(line) for line in read_lines(out_path)] == records


@pytest.mark.parametrize("threads", [1, 2])
def test_parquet_round_trip_keeps_order_schema_and_row_groups(tmp_path: Path, threads: int):
    src_path, out_path = tmp_path / "in.parquet", tmp_path / "out.parquet"
    table = pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "name": [f"n{i}" for i in range(ROWS)],
        "score": [None if i % 7 == 0 else i / 8 for i in range(ROWS)],
    })
    pq.write_table(table, src_path, row_group_size=1200)
    flow = pipe(es.ops.FromParquet(src_path, batch_rows=700),
                es.ops.ToParquet(out_path, schema=table.schema, row_group_rows=1500))
    result = run(flow, threads)
    assert result.outputs["out"] == WrittenFile(str(out_path), ROWS)
    written = pq.ParquetFile(out_path)
    assert written.read().equals(table)
    assert written.metadata.num_row_groups == math.ceil(ROWS / 1500)


def test_parquet_sink_infers_schema_from_first_rows(tmp_path: Path):
    out_path = tmp_path / "out.parquet"
    rows = [{"k": i, "s": str(i)} for i in range(ROWS)]
    run(pipe(es.ops.FromIterable(rows), es.ops.ToParquet(out_path, row_group_rows=1000)))
    assert pq.read_table(out_path).to_pylist() == rows


def test_parquet_source_selects_columns(tmp_path: Path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [0.5, 1.5, 2.5]}), path)
    result = run(pipe(es.ops.FromParquet(path, columns=["c", "a"]), es.ops.Collect()))
    assert [sorted(r.items()) for r in result.outputs["out"]] == [
        [("a", 1), ("c", 0.5)], [("a", 2), ("c", 1.5)], [("a", 3), ("c", 2.5)]]


@pytest.mark.parametrize("threads", [1, 2])
def test_text_lines_strip_newlines_in_order(tmp_path: Path, threads: int):
    path = tmp_path / "in.txt"
    lines = [f"line {i} ✓" if i % 10 else "" for i in range(3000)]
    # Mixed line endings, and no newline after the last line.
    path.write_bytes("".join(f"{s}\r\n" if i % 2 else f"{s}\n" for i, s in enumerate(lines)).encode()
                     + b"tail")
    result = run(pipe(es.ops.TextLines(path), es.ops.Collect()), threads)
    assert result.outputs["out"] == lines + ["tail"]


def test_text_lines_undecodable_line_names_file_and_line(tmp_path: Path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\n" * 600 + b"bad \xff here\n" + b"ok\n")
    with pytest.raises(es.OperatorError) as info:
        run(pipe(es.ops.TextLines(path), es.ops.Collect()))
    cause = info.value.__cause__
    assert isinstance(cause, es.RecordError)
    assert (cause.path, cause.line) == (str(path), 601)
    assert "0xff" in cause.reason and f"{path}:601:" in str(info.value)


def test_text_lines_other_encoding(tmp_path: Path):
    path = tmp_path / "in.txt"
    path.write_bytes("é\nß\n".encode("latin-1"))
    assert run(pipe(es.ops.TextLines(path, encoding="latin-1"), es.ops.Collect())).outputs["out"] == ["é", "ß"]


# -- CSV source details ------------------------------------------------------------------

def test_csv_without_header_uses_columns(tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_text("1;x\n2;y\n", encoding="utf-8")
    src = es.ops.FromCSV(path, header=False, columns=["n", "s"], types={"n": int}, delimiter=";")
    assert run(pipe(src, es.ops.Collect())).outputs["out"] == [{"n": 1, "s": "x"}, {"n": 2, "s": "y"}]


def test_csv_columns_rename_header_and_bom_is_dropped(tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_bytes("\ufeffA,B\r\n\r\n1,2\r\n".encode())
    plain = run(pipe(es.ops.FromCSV(path), es.ops.Collect())).outputs["out"]
    renamed = run(pipe(es.ops.FromCSV(path, columns=["x", "y"]), es.ops.Collect())).outputs["out"]
    assert plain == [{"A": "1", "B": "2"}]
    assert renamed == [{"x": "1", "y": "2"}]


def test_csv_empty_file_emits_nothing(tmp_path: Path):
    path = tmp_path / "empty.csv"
    path.write_text("", encoding="utf-8")
    assert run(pipe(es.ops.FromCSV(path), es.ops.Collect())).outputs["out"] == []


@pytest.mark.parametrize("content, reason", [
    ("a,a\n1,2\n", "duplicate column names ['a']"),
    ("a,\xff\n1,2\n", "header: not valid"),
])
def test_csv_bad_header_always_fails(tmp_path: Path, content: str, reason: str):
    path = tmp_path / "in.csv"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(es.OperatorError) as info:
        run(pipe(es.ops.FromCSV(path, on_error="skip"), es.ops.Collect()))
    assert isinstance(info.value.__cause__, es.RecordError)
    assert info.value.__cause__.line == 1 and reason in info.value.__cause__.reason


# Rows short of the header's width: two fields, one field, one empty quoted field.
SHORT_ROWS = [(3, "4,5", "expected 3 fields, got 2"), (4, "6", "expected 3 fields, got 1"),
              (5, '""', "expected 3 fields, got 1")]


def write_short_rows(tmp_path: Path) -> Path:
    path = tmp_path / "short.csv"
    lines = ["a,b,c", "1,2,3", *(raw for _, raw, _ in SHORT_ROWS), "", "7,8,9"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD_OF_SHORT = [{"a": "1", "b": "2", "c": "3"}, {"a": "7", "b": "8", "c": "9"}]


def test_csv_row_with_too_few_fields_fails_under_fail(tmp_path: Path):
    path = write_short_rows(tmp_path)
    with pytest.raises(es.OperatorError) as info:
        run(pipe(es.ops.FromCSV(path, on_error="fail"), es.ops.Collect()))
    cause = info.value.__cause__
    assert isinstance(cause, es.RecordError)
    assert (cause.line, cause.reason) == (SHORT_ROWS[0][0], SHORT_ROWS[0][2])


def test_csv_rows_with_too_few_fields_are_skipped_and_counted(tmp_path: Path):
    result = run(pipe(es.ops.FromCSV(write_short_rows(tmp_path), on_error="skip"), es.ops.Collect()))
    assert result.outputs["out"] == GOOD_OF_SHORT
    assert result.stats.operators["src"].malformed == len(SHORT_ROWS)


def test_csv_rows_with_too_few_fields_are_dead_letters(tmp_path: Path):
    path = write_short_rows(tmp_path)
    flow = es.Flow("short")
    src = flow.add(es.ops.FromCSV(path, on_error="dead_letter"), name="src")
    src >> flow.add(es.ops.Collect(), name="out")
    flow.connect(src.out(1), flow.add(es.ops.Collect(), name="dead").in_(0))
    result = run(flow)
    assert result.outputs["out"] == GOOD_OF_SHORT
    assert result.outputs["dead"] == [DeadLetter(str(path), line, reason, raw) for line, raw, reason in SHORT_ROWS]
    assert result.stats.operators["src"].malformed == 0


def test_csv_types_naming_unknown_column(tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown columns \['c'\]"):
        es.ops.FromCSV(path, header=False, columns=["a", "b"], types={"c": int})
    with pytest.raises(es.OperatorError, match=r"unknown columns \['c'\]"):
        run(pipe(es.ops.FromCSV(path, types={"c": int}), es.ops.Collect()))


@pytest.mark.parametrize("kwargs, message", [
    ({"header": False}, "needs columns"),
    ({"delimiter": ";;"}, "one character"),
    ({"on_error": "ignore"}, "on_error must be one of"),
    ({"types": {"a": 3}}, "not callable"),
    ({"columns": ["a", "a"]}, "duplicate"),
])
def test_csv_bad_arguments_fail_at_construction(tmp_path: Path, kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        es.ops.FromCSV(tmp_path / "x.csv", **kwargs)


def test_error_policy_names_and_port_counts(tmp_path: Path):
    assert ErrorPolicy.parse("dead_letter") is ErrorPolicy.DEAD_LETTER
    with pytest.raises(ValueError, match="'fail', 'skip', 'dead_letter'"):
        es.ops.FromJSONL(tmp_path / "x.jsonl", on_error="retry")
    assert es.ops.FromJSONL(tmp_path / "x.jsonl", on_error="skip").n_outputs == 1
    dl = es.ops.FromJSONL(tmp_path / "x.jsonl", on_error="dead_letter")
    assert dl.n_outputs == 2 and dl.required_outputs() == frozenset({1})


def test_records_module_examples_run():
    import elastream.ops.records as records

    assert doctest.testmod(records).failed == 0


def test_text_decoding_and_arrow_rows_examples_run():
    import elastream.ops.arrow_rows as arrow_rows
    import elastream.ops.text_decoding as text_decoding

    for module in (text_decoding, arrow_rows):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_file_sources_module_still_names_every_source():
    import elastream.ops.file_sources as file_sources

    for name in ("TextLines", "FromCSV", "FromJSONL", "FromParquet"):
        assert getattr(file_sources, name) is getattr(es.ops, name)
    assert callable(file_sources.rows_of) and callable(file_sources.column_values)


def test_messages_are_frozen_slotted(tmp_path: Path):
    letter = DeadLetter("p", 3, "r", "raw")
    with pytest.raises(AttributeError):
        letter.line = 4  # type: ignore[misc]
    assert not hasattr(letter, "__dict__") and not hasattr(WrittenFile("p", 1), "__dict__")


# -- Parquet source errors -------------------------------------------------------------------

def test_parquet_missing_file_names_it(tmp_path: Path):
    path = tmp_path / "missing.parquet"
    with pytest.raises(es.OperatorError, match="missing.parquet") as info:
        run(pipe(es.ops.FromParquet(path), es.ops.Collect()))
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_parquet_unreadable_file_names_it(tmp_path: Path):
    path = tmp_path / "not.parquet"
    path.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(es.OperatorError, match=r"cannot read '.*not\.parquet' as Parquet") as info:
        run(pipe(es.ops.FromParquet(path), es.ops.Collect()))
    assert isinstance(info.value.__cause__, ValueError)


def test_parquet_unknown_column_names_it(tmp_path: Path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(es.OperatorError, match=r"no column\(s\) \['zz'\]"):
        run(pipe(es.ops.FromParquet(path, columns=["zz"]), es.ops.Collect()))


# -- sink details ------------------------------------------------------------------------------

def test_csv_sink_tuples_with_and_without_header(tmp_path: Path):
    with_header, bare = tmp_path / "h.csv", tmp_path / "b.csv"
    rows = [(i, f"s{i}") for i in range(3)]
    run(pipe(es.ops.FromIterable(rows), es.ops.ToCSV(with_header, columns=["n", "s"])))
    run(pipe(es.ops.FromIterable(rows), es.ops.ToCSV(bare)))
    assert read_lines(with_header) == ["n,s", "0,s0", "1,s1", "2,s2"]
    assert read_lines(bare) == ["0,s0", "1,s1", "2,s2"]


def test_csv_sink_with_columns_writes_header_for_empty_stream(tmp_path: Path):
    path = tmp_path / "out.csv"
    assert run(pipe(es.ops.FromIterable([]), es.ops.ToCSV(path, columns=["a", "b"]))).outputs["out"].rows == 0
    assert read_lines(path) == ["a,b"]


def test_csv_sink_dicts_missing_field_is_empty(tmp_path: Path):
    path = tmp_path / "out.csv"
    run(pipe(es.ops.FromIterable([{"a": 1, "b": 2}, {"a": 3}]), es.ops.ToCSV(path)))
    assert read_lines(path) == ["a,b", "1,2", "3,"]


@pytest.mark.parametrize("bad, message", [
    ({"a": 1, "zz": 2}, r"fields \['zz'\] not in the columns"),
    ((1, 2), "is a tuple, but this file holds dict records"),
])
def test_csv_sink_bad_record_keeps_earlier_rows(tmp_path: Path, bad, message: str):
    path = tmp_path / "out.csv"
    records = [{"a": i} for i in range(10)] + [bad] + [{"a": 99}]
    sink = es.ops.ToCSV(path)
    with pytest.raises(es.OperatorError, match=message) as info:
        run(pipe(es.ops.FromIterable(records), sink))
    # The run worked on its own instance of the sink: what it wrote is in the error's partial result.
    assert info.value.partial.outputs["out"].rows == 10
    assert read_lines(path) == ["a"] + [str(i) for i in range(10)]


def test_jsonl_sink_unserialisable_record_keeps_earlier_rows(tmp_path: Path):
    path = tmp_path / "out.jsonl"
    sink = es.ops.ToJSONL(path)
    with pytest.raises(es.OperatorError, match=r"record 4 .* cannot be written as JSON") as info:
        run(pipe(es.ops.FromIterable([{"i": 0}, {"i": 1}, {"i": 2}, {"i": object()}]), sink))
    assert isinstance(info.value.__cause__, TypeError)
    assert [json.loads(s) for s in read_lines(path)] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_parquet_sink_bad_row_names_it_and_keeps_earlier_rows(tmp_path: Path):
    path = tmp_path / "out.parquet"
    rows = [{"a": i} for i in range(ROWS)]
    rows[3210] = {"a": "not a number"}
    sink = es.ops.ToParquet(path, schema=pa.schema([("a", pa.int64())]), row_group_rows=1000)
    with pytest.raises(es.OperatorError, match=r"row 3211 .*does not fit the schema"):
        run(pipe(es.ops.FromIterable(rows), sink))
    assert pq.read_table(path).column("a").to_pylist() == list(range(3210))


def test_parquet_sink_rejects_fields_outside_schema(tmp_path: Path):
    path = tmp_path / "out.parquet"
    sink = es.ops.ToParquet(path, schema=pa.schema([("a", pa.int64())]))
    with pytest.raises(es.OperatorError, match=r"row 2 .*\['b'\] are not in the schema"):
        run(pipe(es.ops.FromIterable([{"a": 1}, {"a": 2, "b": 3}]), sink))
    assert pq.read_table(path).to_pylist() == [{"a": 1}]


def test_parquet_sink_with_no_rows_leaves_a_valid_file(tmp_path: Path):
    schema = pa.schema([("a", pa.int64())])
    typed, untyped = tmp_path / "typed.parquet", tmp_path / "untyped.parquet"
    run(pipe(es.ops.FromIterable([]), es.ops.ToParquet(typed, schema=schema)))
    run(pipe(es.ops.FromIterable([]), es.ops.ToParquet(untyped)))
    assert pq.read_table(typed).schema.equals(schema) and pq.read_table(typed).num_rows == 0
    assert pq.read_table(untyped).num_rows == 0


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_sinks_flush_everything_accepted_on_shutdown(tmp_path: Path, kind: str):
    path = tmp_path / f"out.{kind}"
    sink = {"csv": es.ops.ToCSV, "jsonl": es.ops.ToJSONL, "parquet": es.ops.ToParquet}[kind](path)
    accepting = threading.Event()

    def endless():
        i = 0
        while True:
            if i == 2000:
                accepting.set()
            yield {"i": i}
            i += 1

    handle = es.Runner(threads=2, max_queue_size=64).start(pipe(es.ops.FromGenerator(endless), sink))
    try:
        assert accepting.wait(20), "the source never produced 2000 records"
    finally:
        result = handle.shutdown(timeout=10)
    written = result.outputs["out"].rows
    assert written > 0
    if kind == "csv":
        got = [int(s) for s in read_lines(path)[1:]]
    elif kind == "jsonl":
        got = [json.loads(s)["i"] for s in read_lines(path)]
    else:
        got = pq.read_table(path).column("i").to_pylist()
    assert got == list(range(written))
