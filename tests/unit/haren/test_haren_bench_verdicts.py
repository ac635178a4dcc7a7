"""``bench haren``'s workload and verdicts on fixed numbers (behaviour only, never speed)."""

from __future__ import annotations

import math
import random

from elastream.bench import _figures_haren as figs
from elastream.bench._haren_runs import flatness
from elastream.bench._haren_workload import PacedSource, draw_query


def test_queries_follow_section_7_1():
    rng = random.Random(5)
    for i in range(50):
        q = draw_query(f"q{i}", rng, base_us=5.0, rate=10.0)
        assert len(q.costs_us) == len(q.selectivities) == 12
        per_op = math.exp(math.log(q.selectivity) / 12)
        assert 0.01 * 0.9 ** 12 <= q.selectivity <= 1.1 ** 12
        classes = {round(math.log2(c / 5.0)) for c in q.costs_us}
        assert len(classes) == 1 and classes <= set(range(5))            # one cost class z per query
        z = classes.pop()
        assert all(0.9 * 5.0 * 2 ** z <= c <= 1.1 * 5.0 * 2 ** z for c in q.costs_us)
        assert all(0.85 * per_op <= s <= 1.15 * per_op for s in q.selectivities)


def test_a_bursting_source_skips_its_off_phases():
    src = PacedSource(rate=2.0, seconds=100, burst=(1.0, 3.0))
    due, seen = 0.0, [0.0]
    for _ in range(4):
        due = src._next_due(due, start=0.0)
        seen.append(due)
    assert seen == [0.0, 0.5, 4.0, 4.5, 8.0]                              # on 0-1 s, off 1-4 s, on 4-5 s
    steady = PacedSource(rate=4.0, seconds=1)
    assert steady._next_due(1.0, start=0.0) == 1.25


def test_flatness_compares_the_last_third_of_the_run_with_the_first():
    assert flatness([[0, 1.0], [1, 1.0], [2, 1.1], [3, 0.9], [4, 1.0], [5, 1.05]]) == 1.05
    assert flatness([[0, 1.0], [1, 2.0], [2, 4.0], [3, 8.0], [4, 16.0], [5, 32.0]]) == 16.0
    assert flatness([[0, 1.0]]) is None


def _synthetic(config, queries, mean, worst, queued):
    return {"config": config, "queries": queries, "throughput_tps": 100.0, "mean_latency_s": mean,
            "max_latency_s": worst, "queued_tuples": queued, "memory_mb": 1.0, "cores_used": 1.0}


def test_fig4_verdict_reads_the_largest_query_count():
    rows = [_synthetic("os", 5, 0.01, 0.02, 1), _synthetic("fcfs", 5, 0.5, 9.0, 99),
            _synthetic("os", 20, 1.0, 3.0, 500), _synthetic("fcfs", 20, 0.5, 1.0, 300),
            _synthetic("hr", 20, 0.4, 4.0, 400), _synthetic("chain", 20, 2.0, 5.0, 900)]
    v = figs.verdict_fig4({"synthetic": rows})
    assert v.reproduces == "partly"
    assert "✓ 20 queries, max latency s FCFS < OS" in v.why and "✗ 20 queries, queued tuples Chain < OS" in v.why
    assert figs.table_fig4({"synthetic": rows}).rows[2][:2] == [20, "os"]


def test_fig5_verdict_holds_each_period_to_its_bound():
    rows = [{"policy": "fcfs", "queries": 20, "period_s": 0.1, "total": 0.03, "priority": 0, "sort": 0,
             "update": 0, "coord": 0.03},
            {"policy": "fcfs", "queries": 20, "period_s": 0.25, "total": 0.025, "priority": 0, "sort": 0,
             "update": 0, "coord": 0.025}]
    v = figs.verdict_fig5({"overhead": rows})
    assert v.reproduces == "partly" and "✓ fcfs, P = 0.1 s, 20 queries: 3.00% < 5%" in v.why
    assert "✗ fcfs, P = 0.25 s, 20 queries: 2.50% < 2%" in v.why


def _mc(os_high_max, mc_high_max, os_low_mean, mc_low_mean, flat):
    def row(config, high_max, low_mean, flat_value):
        return {"config": config, "classes": {
            "high": {"throughput_tps": 1.0, "mean_latency_s": high_max / 2, "max_latency_s": high_max,
                     "max_latency_flatness": flat_value},
            "low": {"throughput_tps": 1.0, "mean_latency_s": low_mean, "max_latency_s": 9.0,
                    "max_latency_flatness": 1.0}}}
    return {"rows": [row("os", os_high_max, os_low_mean, 3.0), row("multiclass", mc_high_max, mc_low_mean, flat)]}


def test_fig9_verdict_wants_ten_times_lower_flat_high_max_and_low_within_twice_os():
    assert figs.verdict_fig9(_mc(20.0, 0.1, 2.0, 3.0, 1.2)).reproduces == "yes"
    v = figs.verdict_fig9(_mc(2.0, 0.5, 2.0, 5.0, 3.0))
    assert v.reproduces == "no"
    assert "✗ HIGH max latency under Multi-class flat (last third ÷ first third 3 ≤ 2)" in v.why
    assert figs.verdict_fig8(_mc(2.0, 0.5, 2.0, 3.0, 1.0)).reproduces == "yes"
    assert figs.table_multiclass(_mc(2.0, 0.5, 2.0, 3.0, 1.0)).rows[2][:2] == ["multiclass", "high"]
