"""``elastream bench haren`` end to end on tiny runs: what it reports, not how fast (behaviour only)."""

from __future__ import annotations

import json

import pytest

from elastream.cli.main import main


def _json(capsys, *argv: str) -> dict:
    assert main(["bench", "haren", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_synthetic_and_overhead_report_every_configuration_and_phase(capsys, tmp_path):
    result = _json(capsys, "--scenarios", "synthetic", "overhead", "--queries", "2", "--seconds", "0.6",
                   "--configs", "os", "fcfs", "--periods", "0.1", "--out", str(tmp_path))
    assert [(r["config"], r["queries"]) for r in result["synthetic"]] == [("os", 2), ("fcfs", 2)]
    for r in result["synthetic"]:
        assert r["egress"] > 0 and r["throughput_tps"] > 0 and r["max_latency_s"] >= r["mean_latency_s"] > 0
    (over,) = result["overhead"]
    assert over["policy"] == "fcfs" and over["period_s"] == 0.1 and over["scheduling_tasks"] >= 2
    assert 0 <= over["total"] == pytest.approx(sum(over[k] for k in ("priority", "sort", "update", "coord")))
    assert "GIL released" in result["notes"]["gil"]
    assert (tmp_path / "haren.png").stat().st_size > 0 and json.loads((tmp_path / "haren.json").read_text())


def test_multiclass_bursting_compares_high_and_low_with_os(capsys):
    result = _json(capsys, "--scenarios", "multiclass2", "--quick", "--mc-seconds", "1.5", "--burst", "0.5", "0.5",
                   "--out", "")
    rows = result["multiclass2"]["rows"]
    assert [r["config"] for r in rows] == ["os", "multiclass"]
    for r in rows:
        assert set(r["classes"]) == {"high", "low"} and r["scenario"] == 2
        assert r["classes"]["high"]["egress"] > 0 and r["classes"]["low"]["egress"] > 0
    assert set(result["multiclass2"]["verdict"]) == {"high_max_os_over_multiclass", "low_mean_multiclass_over_os"}
