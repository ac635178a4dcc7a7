"""``elastream bench figures``: measurements shared between figures, the full settings, the suite's wall time.

Behaviour only, with the benchmarks stubbed: which benchmark runs a figure makes,
which it takes from another figure's, and what the report's first line says
about the runs recorded in the output directory. Never speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elastream.bench import _figures_cstream as cstream
from elastream.bench import _figures_elastic as elastic
from elastream.bench import _figures_haren as haren
from elastream.bench import _figures_ibm as ibm
from elastream.bench import _figures_ordered as ordered
from elastream.bench import figures
from elastream.bench._figures_report import write_report
from elastream.bench._figures_wall import RUNS_FILE, load_runs, record_run, suite_wall, wall_line
from elastream.cli.main import main

pytestmark = pytest.mark.timeout(60)

MACHINE = {"cpus": 2, "python": "3.11.7", "gil_enabled": True, "load_average_1min": 0.5}


def fake_topology(calls: list[list[str]]) -> Any:
    """A ``bench_run`` stand-in for ``bench topology``: one row per thread count, the options echoed."""
    def run(name: str, argv: list[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        assert name == "topology"
        calls.append(argv)
        opt = dict(zip(argv[::2], argv[1::2]))
        after = argv[argv.index("--threads") + 1:]
        threads = [int(t) for t in after[:next((i for i, t in enumerate(after) if t.startswith("--")), len(after))]]
        return {"topology": opt["--topology"], "cost_us": float(opt.get("--cost-us", 100)),
                "busy_operators": int(opt.get("--ops", 12)), "selectivity": float(opt.get("--selectivity", 1)),
                "command": "elastream bench topology " + " ".join(argv),
                "results": [{"policy": opt["--policy"], "threads": t, "throughput_tuples_per_s": 100.0 * t,
                             "mean_latency_ms": 1.0, "p99_latency_ms": 2.0} for t in threads]}
    return run


def test_sweeps_take_their_default_point_from_fig4s_two_thread_runs(monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(cstream, "bench_run", fake_topology(calls))
    monkeypatch.setattr(cstream, "_threads_cache", {})
    cstream.run_threads(True)
    made_by_fig4 = len(calls)
    cost = cstream.run_cost(True)
    sweep_calls = calls[made_by_fig4:]
    assert all(c[c.index("--cost-us") + 1] != "100" for c in sweep_calls)  # the 100 µs point is not run again
    assert len(sweep_calls) == 2 * len(cstream.QUICK_POLICIES)
    shared = [r for r in cost["rows"] if r["x"] == 100.0]
    assert [(r["policy"], r["threads"], r["tuples_per_s"]) for r in shared] == [
        (p, 2, 200.0) for p in cstream.QUICK_POLICIES]
    assert [r["x"] for r in cost["rows"]] == [50.0] * 3 + [100.0] * 3 + [200.0] * 3
    selectivity = cstream.run_selectivity(True)
    assert {r["x"] for r in selectivity["rows"]} == {0.8, 0.9, 1.0}
    assert len(calls) - made_by_fig4 == 2 * 3 + 2 * 3  # cost and selectivity: two points each run


def test_a_sweep_alone_runs_its_default_point_itself(monkeypatch):
    calls: list[list[str]] = []
    monkeypatch.setattr(cstream, "bench_run", fake_topology(calls))
    monkeypatch.setattr(cstream, "_threads_cache", {})
    rows = cstream.run_cost(True)["rows"]
    assert len(calls) == 3 * len(cstream.QUICK_POLICIES) and len(rows) == 9


def test_haren_figs_4_and_5_share_one_run_of_both_scenarios(monkeypatch, tmp_path):
    calls: list[list[str]] = []

    def fake(name: str, argv: list[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        calls.append(argv)
        return {"synthetic": [{"config": "os", "queries": 5, "throughput_tps": 1.0, "mean_latency_s": 1.0,
                               "max_latency_s": 1.0}],
                "overhead": [{"policy": "fcfs", "queries": 5, "period_s": 0.1, "total": 0.01}], "command": "c"}
    monkeypatch.setattr(haren, "bench_run", fake)
    monkeypatch.setattr(haren, "_shared", {})
    reg = {f.key: f for f in figures.registry()}
    assert reg["haren-fig4"].run(False) is reg["haren-fig5"].run(False)
    ((argv),) = calls
    assert argv[:3] == ["--scenarios", "synthetic", "overhead"] and "--configs" not in argv
    assert Path(reg["haren-fig5"].plot(reg["haren-fig5"].run(False), str(tmp_path / "f5.png"))).exists()


def test_full_settings_keep_the_issues_minimums_and_sweep_where_the_best_static_runs_are():
    argv = elastic._argv("cstream-fig9", False, "/tmp/x")
    opt = {k: argv[argv.index(k) + 1:argv.index(k) + 3] for k in ("--phase-periods", "--processes", "--fuse")}
    assert int(opt["--phase-periods"][0]) >= 30  # issue 20: load phases of at least 30 periods
    assert opt["--processes"][0] == "2" and opt["--fuse"] == ["on", "off"]
    assert "30 periods a phase" in elastic.SCALE
    assert ibm.CONFIGS == ["manual", "dedicated", "dynamic", "dynamic t1", "dynamic t2"]
    full = ordered.TPCXBB_FULL_ARGV
    assert full[full.index("--scheme-threads") + 1:full.index("--scheme-repeats")] == ["2", "3", "4"]


def option(argv: list[str], name: str) -> list[str]:
    """The values that follow ``name`` in ``argv``, up to the next option."""
    after = argv[argv.index(name) + 1:]
    return after[:next((i for i, a in enumerate(after) if a.startswith("--")), len(after))]


def test_quick_settings_shorten_the_runs_but_keep_each_figures_comparison():
    quick, full = elastic._argv("cstream-fig11", True, "/tmp/x"), elastic._argv("cstream-fig11", False, "/tmp/x")
    assert 0 < int(option(quick, "--phase-periods")[0]) < int(option(full, "--phase-periods")[0])
    assert option(quick, "--threads") == option(full, "--threads") == ["1", "2"]  # the same static thread counts
    assert option(quick, "--processes") == option(full, "--processes")
    assert f"--quick: {elastic.QUICK_PHASE_PERIODS} elastic periods a phase" in elastic.SCALE
    tpcxbb = ordered.TPCXBB_QUICK_ARGV
    assert option(tpcxbb, "--schemes") == option(ordered.TPCXBB_FULL_ARGV, "--schemes") == ["partitioning", "reorder"]
    assert option(tpcxbb, "--scale") == option(ordered.TPCXBB_FULL_ARGV, "--scale")
    assert len(option(tpcxbb, "--scheme-threads")) >= 2  # each scheme's peak is still over thread counts
    assert set(ibm.QUICK_CONFIGS) <= set(ibm.CONFIGS) and {"manual", "dedicated", "dynamic"} <= set(ibm.QUICK_CONFIGS)


# --- the suite's wall time ---------------------------------------------------------------------------------------


def figure_json(out: Path, paper: str, fig: str, run: str | None, quick: bool = False) -> dict[str, Any]:
    record = {"paper": paper, "figure": fig, "title": "t", "claim": "A claim.", "status": "not available",
              "reason": "r", "quick": quick, "wall_s": 1.0,
              "measured": {"date": "2026-11-27T10:00:00+00:00", "commit": "abc1234", **({"run": run} if run else {})}}
    (out / f"{paper}-{fig}.json").write_text(json.dumps(record))
    return record


def run_record(run: str, papers: list[str], wall_s: float, commit: str = "abc1234") -> dict[str, Any]:
    return {"run": run, "commit": commit, "quick": False, "papers": papers, "figures": [], "wall_s": wall_s}


def test_runs_add_up_and_a_run_whose_figures_were_all_measured_again_is_dropped(tmp_path):
    a, b, old = "2026-11-27T10:00:00.000001+00:00", "2026-11-27T10:30:00.000001+00:00", "2026-11-26T09:00:00+00:00"
    results = [figure_json(tmp_path, "ibm", "fig8", a), figure_json(tmp_path, "haren", "fig4", b)]
    record_run(tmp_path, run_record(old, ["ibm"], 99.0), results)  # ibm fig8 no longer comes from it
    record_run(tmp_path, run_record(a, ["ibm"], 600.0), results)
    record_run(tmp_path, run_record(b, ["haren"], 300.0), results)
    assert [r["run"] for r in load_runs(tmp_path)] == [a, b]
    wall = suite_wall(results, load_runs(tmp_path), ["ibm-fig8", "haren-fig4"])
    assert wall["total_s"] == 900.0 and wall["whole"]
    line = wall_line(wall)
    assert line.startswith("**The whole suite took 15.0 min** on 2026-11-27 at `abc1234` (full settings)")
    assert "2 runs of `elastream bench figures`" in line and "(ibm 10.0 min; haren 5.0 min)" in line


def test_wall_line_names_what_it_cannot_count(tmp_path):
    a = "2026-11-27T10:00:00.000001+00:00"
    results = [figure_json(tmp_path, "ibm", "fig8", a), figure_json(tmp_path, "ibm", "fig9", None)]
    record_run(tmp_path, run_record(a, ["ibm"], 120.0), results)
    wall = suite_wall(results, load_runs(tmp_path), ["ibm-fig8", "ibm-fig9", "ibm-fig10"])
    line = wall_line(wall)
    assert line.startswith("**The figures below took 2.0 min**")
    assert "Not counted (measured before runs recorded their time): ibm-fig9." in line
    assert "Not measured here: ibm-fig10." in line
    assert wall_line(suite_wall(results[1:], [], ["ibm-fig9"])).startswith("**The suite's wall time is unknown**")


def test_the_report_opens_with_the_suites_wall_time(tmp_path):
    out = tmp_path / "figs"
    out.mkdir()
    a = "2026-11-27T10:00:00.000001+00:00"
    results = [figure_json(out, "ibm", "fig8", a)]
    record_run(out, run_record(a, ["ibm"], 90.0), results)
    meta = {"generated": "2026-11-27T10:02:00+00:00", "commit": "abc1234", "command": "c", "machine": MACHINE}
    text = write_report(tmp_path / "REPORT.md", out, meta, ["ibm-fig8"]).read_text()
    first = text.split("\n\n")[1]
    assert first.startswith("**The whole suite took 1.5 min** on 2026-11-27 at `abc1234`")
    assert RUNS_FILE not in {p.name for p in out.glob("*-fig*.json")}


def test_a_run_records_its_wall_time_and_the_report_and_output_say_it(tmp_path, capsys, monkeypatch):
    from elastream.bench._figures_core import NotAvailable

    def cannot_measure(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise NotAvailable("stands in for a figure the engine cannot measure")

    monkeypatch.setattr(haren, "_run", cannot_measure)
    out, report = tmp_path / "figs", tmp_path / "REPORT.md"
    assert main(["bench", "figures", "--paper", "haren", "--figure", "fig8", "--quick", "--out", str(out),
                 "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    (run,) = load_runs(out)
    assert run["papers"] == ["haren"] and run["figures"] == ["haren-fig8"] and run["quick"] is True
    assert json.loads((out / "haren-fig8.json").read_text())["measured"]["run"] == run["run"]
    assert "this run took" in printed and "The figures below took" in printed
    assert "**The figures below took" in report.read_text().split("\n\n")[1]
