"""``elastream bench ordered``: structure of every section in ``--quick`` mode and the order check.

Behaviour only — sections, rows, JSON shape, the sequential-order verification
failing loudly — never speed.
"""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from elastream.bench import _ordered_engine as engine
from elastream.bench import ordered
from elastream.bench._ordered_common import check_order
from elastream.cli.bench import benchmark_parser
from elastream.cli.main import main

pytestmark = pytest.mark.timeout(120)

SCHEMES = ("nonblocking", "lock")


def quick(*sections: str, extra: tuple[str, ...] = ()) -> dict:
    """Run ``sections`` of the benchmark in --quick mode; the result must be strict JSON."""
    args = benchmark_parser("ordered", ordered).parse_args(["--quick", "--sections", *sections, *extra])
    result = ordered.run(args)
    json.dumps(result, allow_nan=False)
    return result


def assert_verified(row: dict) -> None:
    assert row["verified"] is True
    assert row["throughput_tuples_per_s"] > 0
    assert row["tuples_out"] > 0


def test_engine_light_rows_per_scheme_and_thread_count():
    result = quick("engine-light")
    section = result["engine-light"]
    assert [(r["batch_size"], r["scheme"], r["threads"]) for r in section["results"]] == [
        (8, s, w) for s in SCHEMES for w in (1, 2)]
    for r in section["results"]:
        assert_verified(r)
        assert r["tuples_out"] == section["tuples"]
        assert r["avg_cost_us"] > 0
    assert section["plain_loop_tuples_per_s"] > 0
    assert result["engine_nonblocking_vs_lock_speedup_2_threads"] == section["nonblocking_vs_lock_speedup_2_threads"]
    assert section["nonblocking_vs_lock_speedup_2_threads_by_batch_size"] == {
        "8": section["nonblocking_vs_lock_speedup_2_threads"]}
    assert section["nonblocking_vs_lock_speedup_2_threads"] > 0
    assert result["gil"] == "release" and "releases the GIL" in result["engine_note"]


def test_engine_pipeline_rows_count_outputs_and_inputs():
    result = quick("engine-pipeline")
    section = result["engine-pipeline"]
    assert [(r["scheme"], r["threads"]) for r in section["results"]] == [(s, w) for s in SCHEMES for w in (1, 2)]
    for r in section["results"]:
        assert_verified(r)
        assert r["batch_size"] == section["batch_size"] == 8
        assert r["tuples_out"] == section["inputs"] * section["selectivity"]
        assert r["throughput_inputs_per_s"] == pytest.approx(r["throughput_tuples_per_s"] / section["selectivity"])
    assert result["engine_pipeline_nonblocking_vs_lock_speedup_2_threads"] > 0


def test_engine_skew_compares_fine_hybrid_partitions_with_one_per_thread():
    section = quick("engine-skew")["engine-skew"]
    assert [r["sigma"] for r in section["results"]] == ordered.QUICK["skew_sigmas"]
    for r in section["results"]:
        assert r["hybrid"]["partitions"] == section["hybrid_partitions"]
        assert r["partitioned"]["partitions"] == section["threads"]
        for scheme in ("hybrid", "partitioned"):
            assert_verified(r[scheme])
            assert r[scheme]["tuples_out"] == section["tuples"]
        assert r["hybrid_vs_partitioned_throughput"] > 0
    # The most skewed keys crowd the centre range partition of the baseline.
    assert section["results"][0]["partitioned"]["max_partition_share"] > 0.5


def test_engine_latency_reports_processing_latency_and_the_100us_ratio():
    result = quick("engine-latency")
    (row,) = result["engine-latency"]["results"]
    assert row["cost_us"] == 100.0 and row["batch_size"] == 32
    assert row["hybrid"]["batch_size"] == row["partitioned"]["batch_size"] == 32
    for scheme in ("hybrid", "partitioned"):
        assert_verified(row[scheme])
        lat = row[scheme]["latency"]
        assert 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    assert result["engine_hybrid_vs_partitioned_latency_ratio_100us"] == row["hybrid_vs_partitioned_latency"]
    assert row["hybrid_vs_partitioned_latency"] == pytest.approx(
        row["hybrid"]["latency"]["mean_ms"] / row["partitioned"]["latency"]["mean_ms"])
    assert row["hybrid_vs_partitioned_p99_latency"] == pytest.approx(
        row["hybrid"]["latency"]["p99_ms"] / row["partitioned"]["latency"]["p99_ms"])


def test_heuristics_rows_per_policy_and_thread_count_with_latency():
    section = quick("heuristics")["heuristics"]
    assert [(r["policy"], r["threads"]) for r in section["results"]] == [
        (p, w) for p in engine.HEURISTIC_POLICIES for w in (1, 2)]
    for r in section["results"]:
        assert_verified(r)
        assert r["tuples_out"] == section["outputs"]
        assert r["latency"]["p50_ms"] <= r["latency"]["p99_ms"]
        assert r["throughput_inputs_per_s"] > 0


def test_a_wrong_engine_output_fails_loudly(monkeypatch):
    real = engine.sequential

    def tampered(stages, items):
        out = real(stages, items)
        out[1], out[2] = out[2], out[1]  # the same multiset, another order
        return out

    monkeypatch.setattr(engine, "sequential", tampered)
    with pytest.raises(RuntimeError, match=r"engine-light/nonblocking/1 threads/batch 8: output differs .* position 1"):
        quick("engine-light")


def test_check_order_names_the_first_difference():
    check_order([1, 2, 3], [1, 2, 3], "same")
    with pytest.raises(RuntimeError, match=r"short: .*2 vs 3 items.*position 2: got '<end of output>'"):
        check_order([1, 2], [1, 2, 3], "short")


def test_sequential_runs_each_stage_kind_in_order():
    stages = [engine.Stage("m", "map", lambda x: x + 1), engine.Stage("f", "filter", lambda x: x % 2 == 0),
              engine.Stage("fm", "flat_map", lambda x: [x, x]),
              engine.Stage("k", "keyed", lambda n, x: (n + 1, [(x, n + 1)]), key=lambda x: x % 4)]
    assert engine.sequential(stages, range(6)) == [(2, 1), (2, 2), (4, 1), (4, 2), (6, 3), (6, 4)]


def test_steady_throughput_uses_the_middle_arrivals_or_falls_back():
    rec = engine.SinkRecord(items=list(range(100)), arrivals=[(float(i), 1) for i in range(100)])
    assert engine.steady_throughput(rec, elapsed_s=1000.0) == pytest.approx(1.0)
    few = engine.SinkRecord(items=list(range(100)), arrivals=[(0.0, 50), (0.001, 50)])
    assert engine.steady_throughput(few, elapsed_s=2.0) == pytest.approx(50.0)


def test_data_structure_sections_still_run_in_quick_mode():
    result = quick("light", "pipeline", "skew", "latency")
    assert {r["workers"] for r in result["light"]["results"]} == {1, 2}
    assert result["nonblocking_vs_lock_speedup_2_workers"] > 0
    assert result["hybrid_vs_partitioned_latency_ratio_100us"] > 0
    assert not any(s in result for s in engine.ENGINE_SECTIONS)


def test_cli_json_report_and_plot(tmp_path, capsys):
    png = tmp_path / "ordered.png"
    assert main(["bench", "ordered", "--quick", "--sections", "engine-latency", "--plot", str(png), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["plot"] == str(png) and png.stat().st_size > 0
    assert result["quick"] is True and not math.isnan(result["load_average_1min_start"])
    out = io.StringIO()
    ordered.print_report(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "engine Fig. 10 latency" in text and "hybrid / partitioned latency at 100 µs" in text
    assert "GIL case (engine sections): release" in text and "load average" in text
