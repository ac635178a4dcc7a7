"""The ``elastream`` command line: demo, bench dispatch and ``--json`` output.

Behaviour only: exit codes, tables printed, JSON shape. Never speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from elastream.cli.main import main

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> list[str]:
    """The installed console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("elastream")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "elastream.cli.main", *args]


def _json_main(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # the whole of stdout is one JSON object


def test_policies_lists_every_registered_policy(capsys):
    import elastream as es

    assert main(["policies"]) == 0
    assert capsys.readouterr().out.split() == es.policies.available()


def test_barrier_demo_exits_zero_and_prints_the_statistics_tables(tmp_path):
    env = {**os.environ, "ELASTREAM_CACHE": str(tmp_path)}
    proc = subprocess.run(_cli("demo", "--barrier"), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ("activations", "busy ms", "tuples in", "write-blocked ratio", "read-blocked s", "write-blocked s",
                 "utilisation", "barrier", "combine"):
        assert text in out
    assert (tmp_path / "demo" / "sensors.csv").exists()


def test_barrier_demo_json_reports_every_row_aligned(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ELASTREAM_CACHE", str(tmp_path))
    result = _json_main(capsys, "demo", "--barrier", "--rows", "500", "--json")
    assert result["records"] == result["aligned"] == 500
    assert set(result["stats"]["operators"]) == {"temperature", "humidity", "barrier", "combine", "records"}
    assert result["stats"]["operators"]["barrier"]["tuples_in"] == 1000
    assert len(result["stats"]["workers"]) == 2


def test_bench_overhead_json(capsys):
    result = _json_main(capsys, "bench", "overhead", "--tuples", "3000", "--repeat", "1", "--threads", "1", "2",
                        "--json")
    assert result["benchmark"] == "overhead" and result["gil"] == "hold"
    assert result["plain_loop_tuples_per_s"] == max(result["nested_loop_tuples_per_s"],
                                                    result["unrolled_loop_tuples_per_s"])
    assert [r["threads"] for r in result["results"]] == [1, 2, "Runner()"]  # plain es.Runner() last
    for r in result["results"]:
        assert r["engine_tuples_per_s"] > 0
        assert r["ratio"] == pytest.approx(r["engine_tuples_per_s"] / r["plain_loop_tuples_per_s"])


def test_bench_topology_json_has_one_row_per_policy_and_thread_count(capsys):
    import elastream as es

    result = _json_main(capsys, "bench", "topology", "--topology", "chain", "--threads", "1", "2", "--policy",
                        "all", "--tuples", "300", "--cost-us", "5", "--json")
    assert result["topology"] == "chain" and result["gil"] == "hold"
    pairs = [(r["policy"], r["threads"]) for r in result["results"]]
    assert pairs == [(p, t) for p in es.policies.available() for t in (1, 2)]
    for r in result["results"]:
        assert r["tuples"] == 300  # --tuples runs to completion: every tuple reaches the sink
        for key in ("throughput_tuples_per_s", "mean_latency_ms", "p99_latency_ms", "cores_used"):
            assert r[key] >= 0


@pytest.mark.parametrize("topology", ["data-parallel", "tree", "reverse-tree"])
def test_bench_topology_runs_every_shape_with_gil_release(capsys, topology):
    result = _json_main(capsys, "bench", "topology", "--topology", topology, "--threads", "2", "--policy", "random",
                        "--tuples", "256", "--cost-us", "5", "--gil", "release", "--json")
    assert result["gil"] == "release" and result["busy_operators"] in (12, 63)
    assert [r["tuples"] for r in result["results"]] == [256]


def test_bench_topology_time_budget_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "tp.png"
    result = _json_main(capsys, "bench", "topology", "--threads", "1", "2", "--policy", "least_recently_run",
                        "--seconds", "0.6", "--warmup", "0.1", "--cost-us", "20", "--plot", str(png), "--json")
    assert result["seconds"] == 0.6 and len(result["results"]) == 2
    assert png.stat().st_size > 0 and result["plot"] == str(png)


def test_bench_latency_json(capsys):
    result = _json_main(capsys, "bench", "latency", "--rate", "1000", "--seconds", "0.3", "--threads", "1", "2",
                        "--json")
    assert result["gil"] == "hold"
    assert [r["threads"] for r in result["results"]] == [1, 2, "Runner()"]
    for r in result["results"]:
        assert r["tuples"] == 300
        assert r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["achieved_tuples_per_s"] > 0


def test_bench_tables_print_without_json(capsys):
    assert main(["bench", "latency", "--rate", "500", "--seconds", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "p99 ms" in out and "GIL case" in out


def test_unknown_benchmark_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nope"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_pyproject_lists_every_package_under_src():
    """bench/ needs an explicit package list; a subpackage missing from it would vanish from wheels."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.relative_to(REPO / "src").parts) for p in (REPO / "src").rglob("__init__.py")
             for p in [p.parent]}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert config["package-dir"]["elastream.bench"] == "bench"


def test_every_benchmark_module_follows_the_protocol():
    import importlib

    from elastream.cli.bench import available

    assert {"overhead", "topology", "latency"} <= set(available())
    for name in available():
        module = importlib.import_module(f"elastream.bench.{name}")
        for attr in ("add_arguments", "run", "print_report"):
            assert callable(getattr(module, attr)), f"elastream.bench.{name} lacks {attr}"


def test_bench_processes_json(capsys):
    result = _json_main(capsys, "bench", "processes", "--processes", "1", "2", "--seconds", "2.5", "--warmup",
                        "1.5", "--cost-us", "20", "--ops", "4", "--hop-tuples", "60", "--json")
    assert result["benchmark"] == "processes" and result["gil"] == "hold"
    assert [r["processes"] for r in result["results"]] == [1, 2]
    for r in result["results"]:
        assert r["tuples"] > 0 and 0 < r["fraction_of_ideal"]
    hops = result["hops"]  # the light flow in one process, then there and back across two
    assert hops["runs"]["one process"]["n"] == hops["runs"]["two hops"]["n"] == 54
    assert 0 < hops["runs"]["one process"]["p50_us"] and 0 < hops["runs"]["two hops"]["p50_us"]


def test_bench_chain_json_checks_every_runner_against_the_plain_loop(capsys):
    result = _json_main(capsys, "bench", "chain", "--tuples", "200", "--ops", "3", "--cost-us", "20", "--repeat", "1",
                        "--json")
    assert result["benchmark"] == "chain" and "hold" in result["note"]
    [job] = result["jobs"]
    assert job["tuples"] == 200 and job["ideal_s"] > 0
    assert [r["config"] for r in job["rows"]] == ["plain loop", "Runner()", "Runner(processes=2)",
                                                  "Runner(processes=2, elastic=False)"]
    assert all(r["share_of_2core_ideal"] > 0 for r in job["rows"][1:]) and job["rows"][0]["share_of_2core_ideal"] is None


def test_bench_report_quick_rewrites_the_readme_block(capsys, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- bench:begin -->\nold\n<!-- bench:end -->\noutro\n")
    result = _json_main(capsys, "bench", "report", "--quick", "--readme", str(readme),
                        "--out", str(tmp_path / "latest.json"), "--json")
    text = readme.read_text()
    assert "\nold\n" not in text and "Engine overhead" in text and text.endswith("outro\n")
    assert {r["benchmark"] for r in result["results"]} == {"overhead", "topology", "latency"}
