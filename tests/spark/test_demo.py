"""``elastream demo``, the main job: cached TPCx-BB data, Spark batch answers, local streaming runs, checked."""

from __future__ import annotations

import json

import pytest

from elastream.cli.main import main
from elastream.workloads.tpcxbb_demo import QUERIES, DemoHooks, DemoOptions, run_demo

SCALE, SEED = 0.01, 11   # the tpcxbb_data fixture's data set (tests/spark/conftest.py)

pytestmark = pytest.mark.spark


def test_demo_runs_every_query_locally_and_matches_spark(demo_cache, spark):
    started, finished = [], []
    hooks = DemoHooks(local_started=lambda q, rows, handle: started.append((q, rows, handle.stats())),
                      local_finished=finished.append)
    result = run_demo(DemoOptions(scale=SCALE, seed=SEED, threads=2), hooks)
    assert result.data_dir == demo_cache and not result.generated
    assert [row.query for row in result.rows] == list(QUERIES)
    assert result.all_match, [(r.query, r.difference) for r in result.rows if not r.match]
    assert [q for q, _, _ in started] == list(QUERIES) and finished == result.rows
    assert all(rows > 0 for _, rows, _ in started)
    for row in result.rows:
        assert row.input_rows > 0 and row.seconds > 0 and row.latency_p50_ms is not None


def test_demo_cli_json_summary(demo_cache, spark, capsys):
    assert main(["demo", "--scale", str(SCALE), "--seed", str(SEED), "--queries", "q04", "q15", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["demo"] == "tpcxbb" and summary["all_match"] is True
    assert [q["query"] for q in summary["queries"]] == ["q04", "q15"]
    assert {"rows", "seconds", "tuples_per_second", "latency_p50_ms", "latency_p99_ms", "match"} <= set(
        summary["queries"][0])
