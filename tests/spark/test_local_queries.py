"""The local engine's streaming pipelines (spec §5) against the Spark batch answers (spec §4, §6).

* On the generated scale-0.01 data set, every query's local answer equals
  the spark-batch answer (exactly; Q4 rounded to 1 decimal, Q15 to 7) under
  several policies, thread counts and 1 or 2 worker processes.
* Hand-made streams for the edge cases the spec calls out, against values
  worked out by hand (no Spark needed).
* Malformed input fails before anything runs, naming table, column and file.
* The flows are made of declarative operators only, in the §5 chains, and
  latency markers never change an answer.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal as M
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import elastream as es
from elastream.cli.main import main
from elastream.tpcxbb.answers import answer_difference, answer_schema
from elastream.tpcxbb.io import TpcxbbDataError
from elastream.tpcxbb.local import latency_ms, percentile, run_query
from elastream.tpcxbb.params import Q01Params, Q02Params, Q03Params, Q04Params, Q15Params
from elastream.tpcxbb.pipelines import Marker, MarkingSource, build_flow, markers_of
from elastream.tpcxbb.schema import STREAM_ORDER, schema_of
from tpcxbb_cases import CASES

DAY = 86_400
TIMEOUT_S = 90.0

# -- local = spark-batch on generated data -------------------------------------------------------------------------

#: (policy, threads, processes): two policies on one process, a third and a fourth on two processes.
MODES = [("least_recently_run", 1, 1), ("lp", 2, 1), ("ct", 1, 2), ("qst", 2, 2)]


@pytest.fixture(scope="module")
def batch_answers(spark, tpcxbb_data):
    """``answer(query, params)``: the spark-batch answer, computed once per case (lazily, to spread the cost)."""
    from elastream.spark.batch import run_batch_query

    cache: dict = {}

    def answer(query: str, params) -> pa.Table:
        key = (query, params)
        if key not in cache:
            cache[key] = run_batch_query(query, tpcxbb_data, params, spark)
        return cache[key]
    return answer


def _assert_same(query: str, expected: pa.Table, actual: pa.Table) -> None:
    assert actual.schema == expected.schema
    difference = answer_difference(query, expected, actual)
    assert difference is None, difference


@pytest.mark.spark
def test_generated_streams_are_read_from_several_ordered_files(tpcxbb_data):
    # First in the module, and cheap: the session's Spark start and data generation land on this test.
    for query in CASES:
        qf = build_flow(query, tpcxbb_data, CASES[query])
        assert qf.stream_files == sorted(qf.stream_files)
        if qf.stream_name == "wcs_stream":     # at scale 0.01 only the click stream spans several files
            assert len(qf.stream_files) > 1
        assert qf.flow.operators[qf.source_name].operator.paths == [str(f) for f in qf.stream_files]


@pytest.mark.spark
@pytest.mark.parametrize(("policy", "threads", "processes"), MODES, ids=[f"{p}-{t}thr-{n}proc" for p, t, n in MODES])
@pytest.mark.parametrize("query", list(CASES))
def test_local_answer_equals_spark_batch(batch_answers, tpcxbb_data, query, policy, threads, processes):
    params = CASES[query]
    run = run_query(query, tpcxbb_data, params, {"policy": policy, "threads": threads, "processes": processes,
                                                 "timeout": TIMEOUT_S})
    expected = batch_answers(query, params)
    assert expected.num_rows > 0
    _assert_same(query, expected, run.answer)
    assert run.engine == "local" and run.seconds > 0 and run.input_rows > 0
    assert 0 < run.latency_p50_ms <= run.latency_p99_ms


OTHER_PARAMS = [
    ("q01", Q01Params(viewed_together_count=0, stores=tuple(range(11)), window_s=30 * DAY, limit=3)),
    ("q02", Q02Params(item_sk=10000, session_timeout_s=600, limit=10)),
    ("q03", Q03Params(views_before_purchase=2, categories=(1, 2, 3, 8), limit=20)),
    ("q04", Q04Params(session_timeout_s=60, cart_page_type="review", checkout_page_type="general")),
    ("q15", Q15Params()),
]


@pytest.mark.spark
@pytest.mark.parametrize(("query", "params"), OTHER_PARAMS, ids=[q for q, _ in OTHER_PARAMS])
def test_local_answer_equals_spark_batch_with_other_parameters(batch_answers, tpcxbb_data, query, params):
    run = run_query(query, tpcxbb_data, params, {"timeout": TIMEOUT_S})
    _assert_same(query, batch_answers(query, params), run.answer)


# -- the flows themselves --------------------------------------------------------------------------------------------

#: §5 chains after the source: SL = stateless, PS = partitioned, SF = stateful.
CHAINS = {
    "q01": ["stateless", "partitioned", "partitioned", "stateful"],
    "q02": ["stateless", "partitioned", "stateless", "partitioned", "stateful"],
    "q03": ["stateless", "partitioned", "partitioned"],
    "q04": ["stateless", "partitioned", "stateless", "stateful"],
    "q15": ["stateless", "stateless", "partitioned"],
}


@pytest.mark.parametrize("query", list(CHAINS))
def test_flows_are_the_section_5_chains_of_declarative_operators(write_tables, query):
    data = _edge_data(write_tables)
    qf = build_flow(query, data, None)
    ops = [h.operator for h in qf.flow.operators.values()]
    assert list(qf.flow.operators)[0] == qf.source_name == "stream"
    assert list(qf.flow.operators)[-1] == qf.sink_name == "answer"
    assert isinstance(ops[0], es.ops.FromParquet) and ops[0].paths == [str(f) for f in qf.stream_files]
    middle = ops[1:-1]
    assert [op.kind for op in middle] == CHAINS[query]
    declarative = (es.ops.FlatMap, es.ops.Map, es.ops.Filter, es.ops.KeyedProcess, es.ops.StatefulProcess)
    assert all(isinstance(op, declarative) for op in middle)  # no coroutine operator: Spark can translate them
    for op in middle:  # shipped to worker processes (and Spark executors) by cloudpickle
        assert type(cloudpickle.loads(cloudpickle.dumps(op))) is type(op)
    assert qf.stream_name == ("ss_stream" if query in ("q01", "q15") else "wcs_stream")


def test_markers_pass_every_stage_and_change_no_answer(write_tables):
    data = _edge_data(write_tables)
    for query in CHAINS:
        plain = build_flow(query, data, None)
        marked = build_flow(query, data, None, marker_every=1)
        plain_out = es.Runner().run(plain.flow, timeout=30).outputs["answer"]
        marked_out = es.Runner(threads=2).run(marked.flow, timeout=30).outputs["answer"]
        assert plain.finish(plain_out).equals(marked.finish(marked_out)), query
        markers = markers_of(marked_out)
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in marked.stream_files)
        assert [m.seq for m in markers] == list(range(rows + 1))  # marker 0 before the first row, then one per row
        assert all(m.latency_s >= 0 for m in markers)


def test_marking_source_places_markers_every_n_rows_across_batches():
    source = MarkingSource(es.ops.FromIterable(range(10)), every=4)
    source.open(None)
    out = []
    while (batch := source.next_batch(3)) is not None:
        out.extend(batch)
    assert [x.seq if isinstance(x, Marker) else x for x in out] == \
        [0, 0, 1, 2, 3, 1, 4, 5, 6, 7, 2, 8, 9]  # markers (by seq) at rows 0, 4 and 8


def test_latency_keeps_the_middle_of_the_stream():
    markers = [Marker(i, 0.0, (100.0 if i in (0, 9) else 0.001 * i)) for i in range(10)]
    p50, p99 = latency_ms(markers + ["answer row"])
    assert (p50, p99) == pytest.approx((4.0, 7.0))  # markers 2..7: the slow first and last are trimmed
    assert latency_ms([]) == (None, None)
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([5], 99) == 5


# -- hand-made edge cases (values worked out by hand) ---------------------------------------------------------------

D0 = 37_000  # an arbitrary date key


def _click(user, day, second, item, page=1, sales=None):
    return {"wcs_click_date_sk": day, "wcs_click_time_sk": second, "wcs_sales_sk": sales, "wcs_item_sk": item,
            "wcs_web_page_sk": page, "wcs_user_sk": user}


def _sort_key(columns):
    # §5 total order: ascending, NULLs first.
    return lambda row: tuple((row[c] is not None, row[c] if row[c] is not None else 0) for c in columns)


def write_stream(root: Path, name: str, rows: list[dict], files: int = 2) -> list[Path]:
    """``rows`` sorted in the §5 order of stream ``name`` and split over ``files`` part files (their order counts)."""
    if name == "ss_stream":
        lines: dict = {}
        for r in rows:
            lines[r["ss_ticket_number"]] = lines.get(r["ss_ticket_number"], 0) + 1
            r.setdefault("ss_line_number", lines[r["ss_ticket_number"]])
    ordered = sorted(rows, key=_sort_key(STREAM_ORDER[name]))
    full = schema_of(name)
    schema = pa.schema([full.field(c) for c in ordered[0]])
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(ordered) // files)
    paths = []
    for i in range(files):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(ordered[i * size:(i + 1) * size], schema=schema), path)
        paths.append(path)
    return paths


def _local(query, data, params, **options):
    return run_query(query, data, params, {"timeout": 30.0, **options}).answer.to_pylist()


@pytest.mark.parametrize("processes", [1, 2])
def test_q02_a_gap_of_exactly_3600_s_stays_in_the_session(tmp_path, processes):
    write_stream(tmp_path, "wcs_stream", [
        # user 1: 10001, then item 5 exactly 3600 s later (same session), item 6 one second further (new session)
        _click(1, D0, 1000, 10001), _click(1, D0, 4600, 5), _click(1, D0, 4600, 5), _click(1, D0, 8201, 6),
        # user 2: a session across midnight (gap 600 s through the date key) holds 10001 and 5 and 7
        _click(2, D0, 86_000, 5), _click(2, D0 + 1, 200, 10001), _click(2, D0 + 1, 300, 7),
        # user 3: 7 a second too late
        _click(3, D0, 0, 10001), _click(3, D0, 3601, 7),
        # NULL user or item: dropped
        _click(None, D0, 10, 10001), _click(None, D0, 11, 9), _click(4, D0, 0, None), _click(4, D0, 1, 10001),
    ], files=3)
    assert _local("q02", tmp_path, Q02Params(), processes=processes) == [
        {"item_sk_1": 5, "item_sk_2": 10001, "cnt": 2}, {"item_sk_1": 7, "item_sk_2": 10001, "cnt": 1}]
    # With a 3599 s timeout, user 1's item 5 leaves 10001's session.
    assert _local("q02", tmp_path, Q02Params(session_timeout_s=3599)) == [
        {"item_sk_1": 5, "item_sk_2": 10001, "cnt": 1}, {"item_sk_1": 7, "item_sk_2": 10001, "cnt": 1}]


def test_q03_equal_timestamps_order_null_sales_first_then_item(tmp_path):
    T = 50_000  # a second of the day
    item = [{"i_item_sk": i, "i_category_id": 2} for i in (3, 8, 21, 22, 23, 24, 25, 26, 10001)]
    item.append({"i_item_sk": 27, "i_category_id": 9})
    _write_table(tmp_path, "item", item)
    write_stream(tmp_path, "wcs_stream", [
        # user 1: views 21..24, then in one second a plain view of 8 and order 99 with items 10001 and 3.
        # Stream order (ts, user, sales NULLS FIRST, item): 8, 3, 10001, so the last 5 before 10001 are
        # 22, 23, 24, 8, 3.
        *[_click(1, 10, T - 100 + k, 21 + k) for k in range(4)],
        _click(1, 10, T, 10001, sales=99), _click(1, 10, T, 3, sales=99), _click(1, 10, T, 8),
        # user 2: 26 one second outside the 10-day window, 25 exactly on its edge, 27 of category 9
        _click(2, 10, T - 1, 26), _click(2, 10, T, 25),
        _click(2, 20, T - 5, 27), _click(2, 20, T, 10001, sales=100),
        # user 3: two purchases of 10001; the second sees the first
        _click(3, 30, 100, 10001, sales=101), _click(3, 30, 200, 10001, sales=102),
        # user 4: one order with two lines of 10001 after a view of 22: each line emits
        _click(4, 40, 99, 22), _click(4, 40, 100, 10001, sales=103), _click(4, 40, 100, 10001, sales=103),
        # a view of 10001 without a sale emits nothing
        _click(5, 40, 1, 22), _click(5, 40, 2, 10001),
    ], files=3)
    expected = [(22, 3), (10001, 2), (3, 1), (8, 1), (23, 1), (24, 1), (25, 1)]
    assert _local("q03", tmp_path, Q03Params(), threads=2, policy="lp") == \
        [{"purchased_item": 10001, "lastviewed_item": v, "cnt": c} for v, c in expected]
    # The last 2 clicks only: user 1 sees 8 and 3; user 2 sees 25 (27 is of category 9); user 3 sees its first
    # 10001; user 4's first line sees 22, its second 22 and the first line: 22 twice, 10001 twice (22 sorts first).
    assert _local("q03", tmp_path, Q03Params(views_before_purchase=2, limit=3)) == \
        [{"purchased_item": 10001, "lastviewed_item": v, "cnt": c} for v, c in [(22, 2), (10001, 2), (3, 1)]]


def test_q04_dynamic_and_order_in_the_same_second_is_not_abandoned(tmp_path):
    _write_table(tmp_path, "web_page", [{"wp_web_page_sk": 1, "wp_type": "dynamic"},
                                        {"wp_web_page_sk": 2, "wp_type": "order"},
                                        {"wp_web_page_sk": 3, "wp_type": "general"}])
    D, O, G = 1, 2, 3
    write_stream(tmp_path, "wcs_stream", [
        # user 1, session A: cart and checkout in the same second: the checkout wins (not abandoned, 3 pages)
        _click(1, D0, 0, 1, G), _click(1, D0, 10, 1, D), _click(1, D0, 10, 1, O),
        # user 1, session B: checkout, then cart (abandoned, 3 pages)
        _click(1, D0, 10_000, 1, O), _click(1, D0, 10_005, 1, D), _click(1, D0, 10_006, 1, G),
        # user 2: cart only (abandoned, 1 page); its click on an unknown page is dropped by the join
        _click(2, D0, 0, 1, D), _click(2, D0, 5, 1, 99),
        # user 3: cart, checkout, then a *purchase* click on a cart page: dropped before sessionization
        _click(3, D0, 0, 1, D), _click(3, D0, 1, 1, O), _click(3, D0, 2, 1, D, sales=7),
        # user 4: cart and a page exactly 3600 s later: one session of 2 pages (abandoned)
        _click(4, D0, 0, 1, D), _click(4, D0, 3600, 1, G),
        # user 5: no cart (not counted); NULL user and NULL page: dropped
        _click(5, D0, 0, 1, G), _click(None, D0, 0, 1, D), _click(6, D0, 0, 1, None),
    ])
    assert _local("q04", tmp_path, Q04Params()) == [{"avg_pages": (3 + 1 + 2) / 3}]
    # No session has a "review" page: no abandoned session, a NULL average (as the batch AVG).
    assert _local("q04", tmp_path, Q04Params(cart_page_type="review")) == [{"avg_pages": None}]


def _sale(day, item, paid, store=10, ticket=1, second=0):
    return {"ss_sold_date_sk": day, "ss_sold_time_sk": second, "ss_item_sk": item, "ss_store_sk": store,
            "ss_ticket_number": ticket, "ss_net_paid": paid}


def _date_dim(first: int, last: int) -> list[dict]:
    base = dt.date(1900, 1, 1)
    return [{"d_date_sk": d, "d_date": (base + dt.timedelta(days=d)).isoformat()} for d in range(first, last + 1)]


def test_q15_days_without_sales_are_not_zeros(tmp_path):
    start = 37_134  # 2001-09-02
    _write_table(tmp_path, "item", [{"i_item_sk": 1, "i_category_id": 1}, {"i_item_sk": 2, "i_category_id": 2},
                                    {"i_item_sk": 3, "i_category_id": 3}, {"i_item_sk": 4, "i_category_id": None}])
    _write_table(tmp_path, "date_dim", _date_dim(start - 10, start + 400))
    write_stream(tmp_path, "ss_stream", [
        # category 1: y = 10 (6 + 4) on day 0, 8 on day 1, 2 on day 4; days 2 and 3 have no point.
        # Least squares over (0,10), (1,8), (4,2): slope -2, intercept 10 + 2·37134 = 74278.
        _sale(start, 1, M("6.00"), ticket=1), _sale(start, 1, M("4.00"), ticket=2), _sale(start + 1, 1, M("8.00")),
        _sale(start + 4, 1, M("2.00")),
        _sale(start + 2, 1, M("50.00"), store=11),  # another store
        _sale(start - 1, 1, M("90.00")),  # the day before the range
        # category 2 rises (slope > 0, not kept); category 3 has one day (no slope, not kept)
        _sale(start, 2, M("1.00")), _sale(start + 6, 2, M("5.00")), _sale(start, 3, M("1.00")),
        _sale(start, 4, M("1.00")),  # item 4 has a NULL category
    ], files=3)
    answer = _local("q15", tmp_path, Q15Params())
    assert answer == [{"cat": 1, "slope": pytest.approx(-2.0, abs=1e-9),
                       "intercept": pytest.approx(74_278.0, rel=1e-12)}]


def test_q01_duplicate_items_in_a_ticket_count_once(tmp_path):
    def line(ticket, item, store=10, hour=0):
        return {"ss_sold_date_sk": D0, "ss_sold_time_sk": hour * 3600 + 5, "ss_item_sk": item, "ss_store_sk": store,
                "ss_ticket_number": ticket, "ss_net_paid": M("1.00")}

    _write_table(tmp_path, "item", [{"i_item_sk": i, "i_category_id": c} for i, c in ((1, 1), (2, 2), (3, 3), (4, 9))])
    write_stream(tmp_path, "ss_stream", [
        line(1, 1), line(1, 2), line(1, 2), line(1, 3),  # basket {1, 2, 3}: item 2 twice
        line(2, 1, hour=1), line(2, 2, hour=1),  # basket {1, 2}, an hour later
        line(3, 2), line(3, 2),  # basket {2}: no self-pair
        line(4, 1, store=11), line(4, 2, store=11),  # a store not in the list
        line(5, 1), line(5, 4)])  # item 4 is not in categories 1-3
    assert _local("q01", tmp_path, Q01Params(viewed_together_count=0)) == [
        {"item_sk_1": 1, "item_sk_2": 2, "cnt": 2}, {"item_sk_1": 1, "item_sk_2": 3, "cnt": 1},
        {"item_sk_1": 2, "item_sk_2": 3, "cnt": 1}]
    assert _local("q01", tmp_path, Q01Params(viewed_together_count=1)) == [
        {"item_sk_1": 1, "item_sk_2": 2, "cnt": 2}]  # strictly greater than the threshold
    h0 = D0 * DAY
    assert _local("q01", tmp_path, Q01Params(viewed_together_count=0, window_s=3600, limit=2)) == [
        {"window_start": h0, "item_sk_1": 1, "item_sk_2": 2, "cnt": 1},
        {"window_start": h0, "item_sk_1": 1, "item_sk_2": 3, "cnt": 1},
        {"window_start": h0 + 3600, "item_sk_1": 1, "item_sk_2": 2, "cnt": 1}]


# -- CLI -----------------------------------------------------------------------------------------------------------


def test_query_cli_local_prints_table_json_and_writes_parquet(write_tables, tmp_path, capsys):
    data = _edge_data(write_tables)
    out = tmp_path / "answers" / "q04.parquet"
    assert main(["query", "q04", "--data", str(data), "--engine", "local", "--threads", "2", "--policy", "lp",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "q04 on local" in printed and "avg_pages" in printed and "latency p50" in printed
    assert pq.read_table(out).schema == answer_schema("q04")
    assert main(["query", "q04", "--data", str(data), "--engine", "local", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"query", "engine", "rows", "seconds", "tuples_per_second", "latency_ms"}
    assert report["engine"] == "local" and report["rows"] == 1 and report["tuples_per_second"] > 0
    assert report["latency_ms"]["p50"] > 0 and report["latency_ms"]["p99"] >= report["latency_ms"]["p50"]


# -- malformed input -----------------------------------------------------------------------------------------------


def test_a_missing_stream_column_names_table_column_and_file(write_tables):
    data = _edge_data(write_tables)
    bad = data / "wcs_stream" / "part-00009.parquet"
    pq.write_table(pa.table({"wcs_click_date_sk": [D0], "wcs_click_time_sk": [0], "wcs_item_sk": [1],
                             "wcs_web_page_sk": [1], "wcs_sales_sk": pa.array([None], pa.int64())}), bad)
    with pytest.raises(TpcxbbDataError) as info:
        run_query("q04", data, None, {})
    assert (info.value.table, info.value.column, info.value.file) == ("wcs_stream", "wcs_user_sk", str(bad))
    assert "'wcs_stream'" in str(info.value) and "'wcs_user_sk'" in str(info.value) and str(bad) in str(info.value)


def test_a_wrong_type_names_table_column_and_file(write_tables):
    data = _edge_data(write_tables)
    bad = data / "ss_stream" / "part-00001.parquet"
    table = pq.read_table(bad)
    pq.write_table(table.set_column(table.schema.get_field_index("ss_store_sk"), "ss_store_sk",
                                    pa.array([str(v) for v in table.column("ss_store_sk").to_pylist()])), bad)
    with pytest.raises(TpcxbbDataError) as info:
        build_flow("q15", data, None)
    assert (info.value.table, info.value.column, info.value.file) == ("ss_stream", "ss_store_sk", str(bad))
    assert "has type string" in str(info.value)


def test_an_unreadable_file_or_a_missing_table_is_named(write_tables, capsys):
    data = _edge_data(write_tables)
    bad = data / "wcs_stream" / "part-00001.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(TpcxbbDataError) as info:
        run_query("q02", data, None, {})
    assert (info.value.table, info.value.file) == ("wcs_stream", str(bad)) and "cannot read" in str(info.value)
    assert main(["query", "q03", "--data", str(data), "--engine", "local"]) == 2
    assert str(bad) in capsys.readouterr().err
    bad.unlink()
    with pytest.raises(TpcxbbDataError, match="table 'web_page' not found"):
        build_flow("q04", _without(data, "web_page"), None)


def test_a_stream_file_broken_while_running_fails_naming_table_and_file(write_tables, monkeypatch):
    from elastream.tpcxbb import local

    data = _edge_data(write_tables)
    real_build = local.build_flow

    def build_then_break(*args, **kwargs):
        qf = real_build(*args, **kwargs)  # validated: now the second file goes bad before the run
        qf.stream_files[1].write_bytes(b"garbage")
        return qf
    monkeypatch.setattr(local, "build_flow", build_then_break)
    with pytest.raises(TpcxbbDataError) as info:
        run_query("q02", data, None, {"timeout": 30.0})
    assert info.value.table == "wcs_stream" and info.value.file == str(data / "wcs_stream" / "part-00001.parquet")


# -- helpers -------------------------------------------------------------------------------------------------------


def _write_table(root: Path, name: str, rows: list[dict]) -> None:
    full = schema_of(name)
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([full.field(c) for c in rows[0]])),
                   folder / "part-00000.parquet")


def _without(data: Path, table: str) -> Path:
    import shutil

    shutil.rmtree(data / table)
    return data


def _edge_data(write_tables) -> Path:
    """A small data set with both streams and every static table (for flow-shape, CLI and error tests)."""
    data = write_tables(
        item=[{"i_item_sk": i, "i_category_id": 1 + i % 3} for i in range(1, 8)] + [
            {"i_item_sk": 10001, "i_category_id": 2}],
        web_page=[{"wp_web_page_sk": p, "wp_type": t} for p, t in ((1, "dynamic"), (2, "order"), (3, "general"))],
        date_dim=_date_dim(37_130, 37_150))
    clicks = [_click(u, 37_134 + k % 3, 100 * k + u, 10001 if k % 4 == 0 else 1 + k % 7, page=1 + k % 3,
                     sales=(500 + k) if k % 5 == 0 else None) for k in range(40) for u in (1, 2, 3)]
    write_stream(data, "wcs_stream", clicks)
    sales = [_sale(37_134 + t // 4, 1 + (t * 3) % 7, M(f"{t}.25"), store=10 if t % 3 else 20, ticket=t // 2,
                   second=t) for t in range(60)]
    write_stream(data, "ss_stream", sales)
    return data
