"""``elastream bench tpcxbb --schemes``: which runs the order-keeping schemes sweep makes, and its peaks.

No Spark and no engine here: ``measure`` is replaced by a stand-in that records the options each
run gets (tests/spark/test_bench_tpcxbb_schemes.py runs the real thing). Behaviour only, never speed.
"""

from __future__ import annotations

from typing import Any

import pytest

from elastream.bench import tpcxbb
from elastream.cli.bench import benchmark_parser

pytestmark = pytest.mark.timeout(30)


def parse(*argv: str) -> Any:
    args = benchmark_parser("tpcxbb", tpcxbb).parse_args(list(argv))
    args.progress = False
    return args


def test_each_scheme_sets_its_own_field_and_keeps_the_others_default():
    assert tpcxbb.ordering_of("partitioning", "partitioned") == ("partitioned", "nonblocking")
    assert tpcxbb.ordering_of("reorder", "lock") == ("hybrid", "lock")
    assert tpcxbb.ordering_of("reorder", "nonblocking") == tpcxbb.ordering_of("partitioning", "hybrid")


def test_the_baseline_both_comparisons_share_runs_once_per_query_and_thread_count():
    args = parse("--queries", "q01", "q15", "--schemes", "partitioning", "reorder", "--scheme-threads", "2", "3")
    runs = tpcxbb.scheme_runs(args)
    assert len(runs) == len(set(runs)) == 2 * 2 * 3           # queries × threads × {baseline, partitioned, lock}
    assert runs[:3] == [("q01", 2, "hybrid", "nonblocking"), ("q01", 2, "partitioned", "nonblocking"),
                        ("q01", 2, "hybrid", "lock")]


def test_the_sweep_runs_the_local_engine_with_each_ordering_in_one_process(monkeypatch):
    seen: list[dict[str, Any]] = []
    rates = {("hybrid", "nonblocking"): 100.0, ("partitioned", "nonblocking"): 60.0, ("hybrid", "lock"): 80.0}

    def fake_measure(engine, query, data_dir, params, options, reference):
        seen.append({"engine": engine, "query": query} | options)
        ordering = options["ordering"]
        rate = rates[(ordering.partitioning, ordering.reorder)] * options["threads"]
        return {"tuples_per_second": rate, "p50_ms": 1000 / rate, "p99_ms": 2000 / rate, "match": True}

    monkeypatch.setattr(tpcxbb, "measure", fake_measure)
    args = parse("--queries", "q03", "--schemes", "partitioning", "reorder", "--scheme-threads", "2", "3",
                 "--scheme-repeats", "2")
    points = tpcxbb.scheme_points(args, "/data", {"q03": None})
    assert len(seen) == 3 * 2 * 2                              # distinct runs × repeats
    assert {(o["engine"], o["processes"], o["policy"]) for o in seen} == {("local", 1, "ct")}
    assert [(p["comparison"], p["scheme"], p["threads"]) for p in points] == [
        ("partitioning", "hybrid", 2), ("partitioning", "hybrid", 3), ("partitioning", "partitioned", 2),
        ("partitioning", "partitioned", 3), ("reorder", "nonblocking", 2), ("reorder", "nonblocking", 3),
        ("reorder", "lock", 2), ("reorder", "lock", 3)]
    assert points[0]["repeats"] == [200.0, 200.0]
    peaks = {(p["comparison"], p["scheme"]): p for p in tpcxbb.scheme_peaks(points)}
    assert peaks["partitioning", "partitioned"]["threads"] == 3
    assert peaks["partitioning", "partitioned"]["tuples_per_second"] == 180.0
    assert peaks["reorder", "lock"]["p50_ms"] == pytest.approx(1000 / 240)
    assert all(p["match"] for p in peaks.values())


def test_a_peak_is_the_best_throughput_and_an_answer_that_differs_anywhere_marks_it():
    points = [{"query": "q01", "comparison": "reorder", "scheme": "lock", "threads": t, "tuples_per_second": r,
               "p50_ms": p50, "p99_ms": 9.0, "match": m}
              for t, r, p50, m in ((2, 50.0, 4.0, True), (3, 70.0, 3.0, True), (4, 65.0, 2.0, False))]
    (peak,) = tpcxbb.scheme_peaks(points)
    assert (peak["threads"], peak["tuples_per_second"], peak["p50_ms"]) == (3, 70.0, 3.0)
    assert peak["match"] is False


def test_the_median_run_counts_with_its_own_latency():
    runs = [{"tuples_per_second": r, "p50_ms": 1.0 / r, "p99_ms": 0.0, "match": True} for r in (30.0, 10.0, 20.0)]
    chosen = tpcxbb._median_run(runs)
    assert (chosen["tuples_per_second"], chosen["p50_ms"], chosen["repeats"]) == (20.0, 1.0 / 20.0, [30.0, 10.0, 20.0])


def test_an_unknown_scheme_comparison_is_refused_by_the_command_line():
    with pytest.raises(SystemExit):
        parse("--schemes", "batching")


def test_the_report_shows_the_schemes_table_alone_when_no_engine_ran():
    from rich.console import Console

    console = Console(record=True, width=160)
    peaks = [{"query": "q01", "comparison": "reorder", "scheme": "lock", "threads": 3, "tuples_per_second": 70.0,
              "p50_ms": 3.0, "p99_ms": 9.0, "match": True}]
    result = {"queries": [], "heuristics": [], "scheme_peaks": peaks, "note": "GIL case: hold",
              "summary": tpcxbb.summary([])}
    tpcxbb.print_report(result, console)
    text = console.export_text()
    assert "order-keeping schemes on the local engine" in text and "TPCx-BB SF" not in text
    assert "q01" in text and "lock" in text and "3.00 / 9.00" in text
