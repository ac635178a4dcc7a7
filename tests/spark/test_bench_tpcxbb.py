"""``elastream bench tpcxbb`` on tiny settings: structure, answers checked, ratios where both engines ran."""

from __future__ import annotations

import json

import pytest

from elastream.cli.main import main

pytestmark = pytest.mark.spark
SCALE, SEED = 0.01, 11   # the tpcxbb_data fixture's data set (tests/spark/conftest.py)


def test_bench_tpcxbb_local_json(demo_cache, spark, capsys):
    assert main(["bench", "tpcxbb", "--scale", str(SCALE), "--seed", str(SEED), "--engines", "local",
                 "--queries", "q03", "q15", "--heuristics", "lp", "ct", "--workers", "1", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "tpcxbb" and result["gil"] == "hold"
    assert [r["query"] for r in result["queries"]] == ["q03", "q15"]
    for row in result["queries"]:
        assert row["local"]["match"] and row["local"]["tuples_per_second"] > 0
        assert "throughput_ratio" not in row          # one engine: no ratio
    assert {(p["query"], p["policy"], p["threads"]) for p in result["heuristics"]} == {
        (q, pol, t) for q in ("q03", "q15") for pol in ("lp", "ct") for t in (1, 2)}
    assert all(p["match"] for p in result["heuristics"])
    assert result["summary"]["all_match"] is True
