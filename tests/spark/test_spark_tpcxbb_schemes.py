"""``elastream bench tpcxbb --schemes`` for real on tiny settings: every scheme's answers equal Spark SQL's."""

from __future__ import annotations

import json

import pytest

from elastream.cli.main import main

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]
SCALE, SEED = 0.01, 11   # the tpcxbb_data fixture's data set (tests/spark/conftest.py)


def test_bench_tpcxbb_schemes_json(demo_cache, spark, capsys):
    assert main(["bench", "tpcxbb", "--scale", str(SCALE), "--seed", str(SEED), "--engines", "--heuristics",
                 "--queries", "q03", "--schemes", "partitioning", "reorder", "--scheme-threads", "2",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["queries"] == [] and result["heuristics"] == []
    assert result["scheme_options"] == {"threads": [2], "policy": "ct", "processes": 1, "repeats": 1}
    assert {(p["query"], p["comparison"], p["scheme"]) for p in result["scheme_peaks"]} == {
        ("q03", c, s) for c, s in (("partitioning", "hybrid"), ("partitioning", "partitioned"),
                                   ("reorder", "nonblocking"), ("reorder", "lock"))}
    assert all(p["match"] and p["tuples_per_second"] > 0 for p in result["schemes"])
