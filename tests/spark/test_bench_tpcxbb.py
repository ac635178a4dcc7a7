"""``elastream bench tpcxbb`` on tiny settings: structure, answers checked, ratios where both engines ran."""

from __future__ import annotations

import json

import pytest

from elastream.cli.main import main
from elastream.workloads.tpcxbb_demo import demo_data_dir

pytestmark = pytest.mark.spark
SCALE, SEED = 0.01, 11   # the tpcxbb_data fixture's data set (tests/spark/conftest.py)


@pytest.fixture
def cached_bench_data(tpcxbb_data, tmp_path, monkeypatch):
    monkeypatch.setenv("ELASTREAM_CACHE", str(tmp_path))
    target = demo_data_dir(SCALE, SEED)
    target.parent.mkdir(parents=True)
    target.symlink_to(tpcxbb_data, target_is_directory=True)
    return target


def test_bench_tpcxbb_local_json(cached_bench_data, spark, capsys):
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
