"""``elastream bench latency --repeats``: rows interleaved, each row's medians and every repeat's p99."""

from __future__ import annotations

import argparse

from elastream.bench import latency


def test_repeats_interleave_the_rows_and_report_medians(monkeypatch):
    order: list = []
    p99s = {1: iter([1.0, 3.0, 2.0]), "Runner()": iter([2.0, 9.0, 4.0])}

    def fake_run_once(threads, args):
        order.append(threads)
        p99 = next(p99s[threads])
        return {"threads": threads, "tuples": 10, "target_rate": args.rate, "achieved_tuples_per_s": 100.0,
                "achieved_over_target": 1.0, "p50_ms": p99 / 2, "p99_ms": p99, "max_ms": p99 * 2,
                "mean_ms": p99 / 2, "elapsed_s": 1.0, "cores_used": 1.0}

    monkeypatch.setattr(latency, "run_once", fake_run_once)
    monkeypatch.setattr(latency, "machine", lambda: {})
    args = argparse.Namespace(rate=100.0, seconds=0.1, threads=[1], policy="p", default_row=True, repeats=3)
    result = latency.run(args)
    assert order == [1, "Runner()", "Runner()", 1, 1, "Runner()"]
    one, default = result["results"]
    assert one["p99_ms_each"] == [1.0, 3.0, 2.0] and one["p99_ms"] == 2.0 and one["p99_over_first"] == 1.0
    assert default["p99_ms_each"] == [2.0, 9.0, 4.0] and default["p99_ms"] == 4.0
    assert default["p99_over_first"] == 2.0 and default["tuples"] == 10 and result["repeats"] == 3


def test_one_repeat_is_the_rows_as_before():
    args = argparse.Namespace(rate=1000.0, seconds=0.1, threads=[1], policy="least_recently_run",
                              default_row=False, repeats=1)
    (row,) = latency.run(args)["results"]
    assert row["threads"] == 1 and row["tuples"] == 100 and row["p99_ms_each"] == [row["p99_ms"]]
    assert row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
