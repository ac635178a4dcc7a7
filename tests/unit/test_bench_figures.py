"""``elastream bench figures``: the registry, the verdicts on fixed numbers, the generated report.

Behaviour only: which figures exist and what each brings, what a verdict says
for given numbers, what REPORT.md contains for given figure JSON files, and the
command end to end on figures that need no measurement. Never speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elastream.bench import _figures_cstream as cstream
from elastream.bench import _figures_elastic as elastic
from elastream.bench import _figures_ibm as ibm
from elastream.bench import _figures_ordered as ordered
from elastream.bench import _figures_pending as pending
from elastream.bench import _figures_turbostream as turbo
from elastream.bench import figures
from elastream.bench._figures_core import Figure, NotAvailable, Table, Verdict, verdict_of
from elastream.bench._figures_report import write_report
from elastream.cli.bench import benchmark_parser
from elastream.cli.main import main

pytestmark = pytest.mark.timeout(60)

#: The figures issue 21 asks for (Haren's are added by its own issue; at least one is registered).
REQUIRED = ({f"c-stream-fig{i}" for i in range(4, 12)} | {f"ibm-fig{i}" for i in range(8, 11)}
            | {f"turbostream-fig{i}" for i in range(8, 11)} | {f"ordered-fig{i}" for i in range(8, 15)})


def parse(*argv: str) -> Any:
    return benchmark_parser("figures", figures).parse_args(list(argv))


# --- the registry ----------------------------------------------------------------------------------------------


def test_registry_covers_every_figure_of_the_issue_each_with_claim_runner_verdict_and_plot():
    reg = figures.registry()
    keys = [f.key for f in reg]
    assert REQUIRED <= set(keys)
    assert any(k.startswith("haren-") for k in keys)
    assert len(keys) == len(set(keys))
    for f in reg:
        assert f.claim.endswith(".") and len(f.claim) > 30, f.key
        assert f.title
        assert all(callable(fn) for fn in (f.run, f.table, f.verdict, f.plot)), f.key


@pytest.mark.parametrize("key", ["haren-fig4", "haren-fig5", "haren-fig8", "haren-fig9"])
def test_haren_figures_are_measured_by_bench_haren(key):
    fig = {f.key: f for f in figures.registry()}[key]
    assert "--quick" in fig.scaled and fig.paper == "haren"  # measured (bench haren), no longer pending


def test_pending_reasons_follow_what_the_engine_offers(monkeypatch):
    monkeypatch.setattr(pending, "models_available", lambda: False)
    assert "needs Runner(model=...) (dedicated" in pending.haren_reason()
    monkeypatch.setattr(pending, "models_available", lambda: True)
    assert "needs Haren's policies (fcfs, hr, chain and the multi-class policy)" in pending.haren_reason()


def _scheme_peaks(comparison: str, rows: dict[str, tuple[float, float, float, float]],
                  schemes: tuple[str, str], match: bool = True) -> list[dict[str, Any]]:
    """``bench tpcxbb`` scheme peaks: per query (first scheme's rate, p50, second's rate, p50)."""
    return [{"query": q, "comparison": comparison, "scheme": scheme, "threads": 2, "tuples_per_second": rate,
             "p50_ms": p50, "p99_ms": 2 * p50, "match": match}
            for q, (r1, l1, r2, l2) in rows.items() for scheme, rate, p50 in ((schemes[0], r1, l1), (schemes[1], r2, l2))]


def test_tpcxbb_scheme_figures_run_bench_tpcxbb_once_for_both(monkeypatch):
    calls: list[tuple[str, list[str]]] = []

    def fake_run(name, argv, extra=None):
        calls.append((name, argv))
        return {"scheme_peaks": []}

    monkeypatch.setattr(ordered, "bench_run", fake_run)
    monkeypatch.setattr(ordered, "_tpcxbb_cache", {})
    reg = {f.key: f for f in figures.registry()}
    assert reg["ordered-fig11"].run(True) is reg["ordered-fig14"].run(True)
    ((name, argv),) = calls
    assert name == "tpcxbb" and argv[argv.index("--schemes") + 1:argv.index("--schemes") + 3] == [
        "partitioning", "reorder"]
    assert "--scale" in argv and "--engines" in argv


def test_partitioning_verdict_table_and_plot_on_fixed_numbers(tmp_path):
    rows = {"q01": (300.0, 5.0, 200.0, 9.0), "q02": (100.0, 4.0, 90.0, 3.0), "q03": (50.0, 2.0, 40.0, 8.0),
            "q04": (80.0, 1.0, 70.0, 2.0), "q15": (60.0, 1.0, 61.0, 1.5)}
    data = {"tpcxbb": {"scheme_peaks": _scheme_peaks("partitioning", rows, ("hybrid", "partitioned"))}}
    v = ordered.verdict_partitioning(data)
    assert v.reproduces == "partly"
    assert "✗ hybrid's peak throughput ≥ partitioned's on 4 of 5 queries" in v.why
    assert "✓ hybrid's p50 latency below partitioned's on 4 of 5 queries (needs 3, the paper's 3 of 5" in v.why
    assert "✓ every run's answer equals Spark SQL's" in v.why
    table = ordered.table_schemes(data, "partitioning", "hybrid", "partitioned")
    assert table.columns[:2] == ["query", "hybrid peak tuples/s"] and table.columns[-2] == "hybrid ÷ partitioned"
    assert table.rows[0] == ["q01", 300.0, 2, 5.0, 200.0, 2, 9.0, 1.5, "yes"]
    path = ordered.plot_partitioning(data, str(tmp_path / "fig11.png"))
    assert Path(path).stat().st_size > 0


def test_reorder_verdict_needs_every_query_and_every_answer():
    rows = {q: (100.0, 1.0, 90.0, 1.0) for q in ("q01", "q02", "q03", "q04", "q15")}
    good = {"tpcxbb": {"scheme_peaks": _scheme_peaks("reorder", rows, ("nonblocking", "lock"))}}
    assert ordered.verdict_reorder(good).reproduces == "yes"
    wrong = {"tpcxbb": {"scheme_peaks": _scheme_peaks("reorder", rows, ("nonblocking", "lock"), match=False)}}
    v = ordered.verdict_reorder(wrong)
    assert v.reproduces == "partly" and "✗ every run's answer equals Spark SQL's batch answer (NO)" in v.why
    assert ordered.verdict_reorder({"tpcxbb": {"scheme_peaks": []}}).reproduces == "no"


def test_paper_and_figure_options_select_and_an_unknown_figure_fails_with_the_known_ones():
    assert [f.key for f in figures.chosen(parse("--paper", "turbostream"))] == [
        "turbostream-fig8", "turbostream-fig9", "turbostream-fig10"]
    assert [f.key for f in figures.chosen(parse("--paper", "ibm", "c-stream", "--figure", "fig9"))] == [
        "c-stream-fig9", "ibm-fig9"]
    with pytest.raises(SystemExit, match="unknown figure.*fig99.*fig8, fig9, fig10"):
        figures.chosen(parse("--paper", "turbostream", "--figure", "fig99"))


# --- verdicts on fixed numbers ---------------------------------------------------------------------------------


def test_verdict_of_all_some_none_and_undecided():
    assert verdict_of([("a", True), ("b", True)]).reproduces == "yes"
    assert verdict_of([("a", True), ("b", False)]) == Verdict("partly", "✓ a; ✗ b")
    assert verdict_of([("a", False)]).reproduces == "no"
    assert verdict_of([("a", None), ("b", True)]) == Verdict("yes", "? a; ✓ b")
    assert verdict_of([("a", None)]).reproduces == "no"


def sweep_data(xs: list[float], tps: dict[str, list[float]], lats: dict[str, list[float]]) -> dict[str, Any]:
    rows = [{"x": x, "policy": p, "tuples_per_s": tps[p][i], "mean_ms": lats[p][i], "p99_ms": None}
            for p in tps for i, x in enumerate(xs)]
    return {"x": "cost µs", "rows": rows}


def test_cost_verdict_yes_when_throughput_falls_linearly_and_latency_rises():
    data = sweep_data([50, 100, 200], {"random": [4000, 2000, 1000], "max_queue": [3900, 2050, 990]},
                      {"random": [1, 2, 4], "max_queue": [2, 3, 6]})
    assert cstream.verdict_cost(data).reproduces == "yes"


def test_cost_verdict_names_the_plug_in_whose_throughput_rises():
    data = sweep_data([50, 100, 200], {"random": [4000, 2000, 1000], "max_queue": [1000, 2000, 4000]},
                      {"random": [1, 2, 4], "max_queue": [2, 3, 6]})
    v = cstream.verdict_cost(data)
    assert v.reproduces == "partly" and "(not: max_queue)" in v.why


def test_monotone_allows_five_percent_noise_and_needs_two_points():
    assert cstream.monotone([100, 103, 200], rising=True)
    assert cstream.monotone([100, 90, 200], rising=True) is False
    assert cstream.monotone([100, 104, 50], rising=False)
    assert cstream.monotone([100, None], rising=False) is None


def thread_rows() -> dict[str, Any]:
    rows = []
    for topo, tps in (("chain", [800, 1500, 1500]), ("data-parallel", [800, 1500, 1400]),
                      ("tree", [700, 1300, 1300]), ("reverse-tree", [700, 1200, 1100])):
        for policy, lat in (("random", [5, 3, 3]), ("max_queue", [9, 4, 4]), ("least_recently_run", [4, 2.5, 3])):
            for t, tp, ms in zip((1, 2, 4), tps, lat):
                rows.append({"topology": topo, "policy": policy, "threads": t, "tuples_per_s": tp, "mean_ms": ms,
                             "p99_ms": 2 * ms})
    return {"rows": rows, "cpus": 2}


def test_threads_verdicts_on_the_papers_shape():
    data = thread_rows()
    assert cstream.verdict_fig4(data).reproduces == "yes"
    assert cstream.verdict_fig5(data).reproduces == "yes"
    for r in data["rows"]:
        if r["topology"] == "tree" and r["threads"] == 4:
            r["tuples_per_s"] = 3000  # keeps rising past the cores
    v = cstream.verdict_fig4(data)
    assert v.reproduces == "partly" and "✗ tree: 4 threads give 2.31×" in v.why


def ipc_data(ring: float, queue: float, tcp: float) -> dict[str, Any]:
    def point(size: int, rate: float) -> dict[str, Any]:
        row: dict[str, Any] = {"size_kb": size, "rate": rate}
        for name, p50 in (("ring", ring), ("queue", queue), ("tcp", tcp)):
            row[name] = {"p50_us": p50, "mean_us": p50, "p99_us": 2 * p50}
        row.update(ring_vs_queue_p50=ring / queue, ring_vs_tcp_p50=ring / tcp)
        return row
    rings = [{"multiple": m, "ring_bytes": m * 40960, "rate": 3000.0, "ring": {"p50_us": p, "mean_us": p, "p99_us": p}}
             for m, p in ((3, 150.0), (50, 80.0))]
    return {"ipc": {"transports": ["ring", "queue", "tcp"], "latency_vs_size": [point(10, 100), point(320, 100)],
                    "latency_vs_rate": [point(40, 3000)], "latency_vs_ring_size": rings}}


def test_ipc_verdict_yes_within_the_papers_band_partly_outside_it():
    assert turbo.verdict_ipc(ipc_data(ring=100, queue=400, tcp=300)).reproduces == "yes"
    v = turbo.verdict_ipc(ipc_data(ring=100, queue=400, tcp=120))
    assert v.reproduces == "partly" and "✗ ring's p50 reduction against TCP" in v.why
    assert len(turbo.table_ipc(ipc_data(100, 400, 300)).rows) == 3 * 3 + 2


def test_placement_verdict_compares_latency_and_throughput_with_round_robin():
    def data(lat_auto: float, tp_auto: float) -> dict[str, Any]:
        return {"processes": {"results": [
            {"processes": 2, "placement": "auto", "throughput_tuples_per_s": tp_auto, "p50_latency_ms": lat_auto,
             "p99_latency_ms": 1.0},
            {"processes": 2, "placement": "round_robin", "throughput_tuples_per_s": 1000.0, "p50_latency_ms": 10.0,
             "p99_latency_ms": 1.0}]}}
    assert turbo.verdict_placement(data(5.0, 1000.0)).reproduces == "yes"
    assert turbo.verdict_placement(data(5.0, 500.0)).reproduces == "partly"
    assert turbo.verdict_placement(data(20.0, 500.0)).reproduces == "no"


def elastic_data(ratios: list[float]) -> dict[str, Any]:
    summary = [{"phase": i, "best_static": "static t=1 p=2 fuse=on", "best_static_tuples_per_s": 1000.0,
                "elastic": [{"config": "elastic", "steady_tuples_per_s": 1000.0 * r, "ratio_to_best_static": r,
                             "converge_periods": 3.0, "converged_runs": 1, "runs": 1}]}
               for i, r in enumerate(ratios)]
    runs = [{"config": "elastic", "repeat": 0, "check": None}]
    return {"elastic": {"shapes": [{"summary": summary, "runs": runs}]}}


def test_elastic_verdict_needs_nine_tenths_of_the_best_static_in_every_phase():
    assert elastic.verdict_elastic(elastic_data([0.95, 1.1, 0.9])).reproduces == "yes"
    v = elastic.verdict_elastic(elastic_data([0.95, 0.5, 0.9]))
    assert v.reproduces == "partly" and "2 of 3 phases (0.95, 0.50, 0.90)" in v.why
    assert elastic.table_shape(elastic_data([0.95])).rows[1][:4] == [0, "elastic", 950.0, 0.95]


def models_data(rates: dict[tuple[str, float], dict[str, float]]) -> dict[str, Any]:
    return {"runs": [{"results": [{"shape": shape, "flops": flops, "config": c, "tuples_per_s": v, "cores_used": 1.0}
                                  for (shape, flops), by in rates.items() for c, v in by.items()]}]}


def test_ibm_fig8_verdict_orders_the_models_per_graph_and_cost():
    paper_like = models_data({
        ("pipeline", 1): {"manual": 10.0, "dedicated": 40.0, "dynamic": 20.0, "dynamic t2": 30.0},
        ("data-parallel", 1): {"manual": 90.0, "dedicated": 5.0, "dynamic": 50.0},
        ("data-parallel", 100000): {"manual": 3.0, "dedicated": 2.0, "dynamic": 4.0}})
    assert ibm.verdict_fig8(paper_like).reproduces == "yes"
    manual_wins = models_data({("pipeline", 1): {"manual": 99.0, "dedicated": 40.0, "dynamic": 20.0}})
    v = ibm.verdict_fig8(manual_wins)
    assert v.reproduces == "partly" and "✗ pipeline, 1 flops: dynamic 20 ≥ manual 99 tuples/s" in v.why


def test_ibm_fig9_verdict_takes_the_best_dynamic_level():
    data = models_data({("mixed", 100): {"manual": 10.0, "dedicated": 12.0, "dynamic": 9.0, "dynamic t4": 15.0}})
    assert ibm.verdict_fig9(data).reproduces == "yes"
    assert ibm.table_models(data).rows[0] == ["mixed", 100, "manual", 10.0, 1.0]


def test_skew_verdict_on_structures_and_engine():
    def rows(skewed: float, uniform: float) -> dict[str, Any]:
        return {"results": [{"sigma": s, "hybrid": {"throughput_tuples_per_s": 100.0 * g},
                             "partitioned": {"throughput_tuples_per_s": 100.0}}
                            for s, g in ((0.05, skewed), (1.0, uniform))]}
    data = {"ordered": {"skew": rows(2.0, 1.0), "engine-skew": rows(1.0, 1.0)}}
    v = ordered.verdict_skew(data)
    assert v.reproduces == "partly"
    assert "✓ data structures: at σ = 0.05" in v.why and "✗ engine: at σ = 0.05" in v.why


# --- measuring a figure and the report -----------------------------------------------------------------------


def fake_figure(run: Any, fig: str = "fig1") -> Figure:
    def plot(data: dict[str, Any], path: str) -> str:
        Path(path).write_bytes(b"\x89PNG fake")
        return path
    return Figure("turbostream", fig, "a fake", "A claim of the paper.", run,
                  lambda d: Table(["x", "y"], [[1, d["y"]]]), lambda d: verdict_of([("y > 1", d["y"] > 1)]), plot,
                  "scaled down")


def test_measure_writes_json_and_png_and_records_failures_without_raising(tmp_path):
    stamp = {"date": "2026-01-01T00:00:00+00:00", "commit": "abc1234", "quick": True}
    ok = figures.measure(fake_figure(lambda quick: {"y": 2.0, "command": "elastream bench ipc --quick"}), True,
                         tmp_path, stamp)
    assert ok["status"] == "measured" and ok["verdict"]["reproduces"] == "yes"
    assert ok["bench_commands"] == ["elastream bench ipc --quick"]
    assert (tmp_path / "turbostream-fig1.png").exists()
    assert json.loads((tmp_path / "turbostream-fig1.json").read_text())["table"]["rows"] == [[1, 2.0]]

    def boom(quick: bool) -> dict[str, Any]:
        raise ValueError("no such shape")
    failed = figures.measure(fake_figure(boom, "fig2"), True, tmp_path, stamp)
    assert failed["status"] == "failed" and failed["reason"] == "ValueError: no such shape"
    assert "Traceback" in failed["traceback"]


def write_json(out: Path, record: dict[str, Any]) -> None:
    (out / f"{record['paper']}-{record['figure']}.json").write_text(json.dumps(record))


def test_report_from_fixed_json_has_tables_links_verdicts_and_the_not_yet_measured_section(tmp_path):
    out = tmp_path / "bench" / "results" / "figures"
    out.mkdir(parents=True)
    base = {"claim": "Ring beats Netty.", "quick": True, "wall_s": 3.0,
            "measured": {"date": "2026-01-01T00:00:00+00:00", "commit": "abc1234"}}
    write_json(out, {**base, "paper": "turbostream", "figure": "fig8", "title": "IPC", "status": "measured",
                     "command": "elastream bench figures --paper turbostream --figure fig8 --quick",
                     "bench_commands": ["elastream bench ipc --quick"], "scaled": "2 sizes.",
                     "table": {"columns": ["size KB", "p50 µs"], "rows": [[10, 1234.5], [320, 0.25]]},
                     "png": "turbostream-fig8.png", "verdict": {"reproduces": "partly", "why": "✓ a; ✗ b"}})
    write_json(out, {**base, "paper": "ibm", "figure": "fig8", "title": "1,000 operators", "status": "not available",
                     "reason": "not available yet: needs Runner(model=...)"})
    write_json(out, {**base, "paper": "ordered", "figure": "fig9", "title": "Skew", "status": "failed",
                     "reason": "ValueError: boom"})
    (out / "notes.json").write_text("[1, 2]")  # not a figure: ignored
    meta = {"generated": "2026-01-02T00:00:00+00:00", "commit": "def5678", "command": "elastream bench figures",
            "machine": {"cpus": 2, "python": "3.11.7", "gil_enabled": True, "load_average_1min": 0.5}}
    keys = [f.key for f in figures.registry()]
    text = write_report(tmp_path / "bench" / "REPORT.md", out, meta, keys).read_text()

    assert "on 2 cores, Python 3.11.7, GIL enabled" in text and "commit `def5678`" in text
    assert "| size KB | p50 µs |\n|---:|---:|\n| 10 | 1,234 |\n| 320 | 0.25 |" in text
    assert "| paper | figure | experiment | reproduces |\n|:---|:---|:---|:---|" in text
    assert "![turbostream fig8](results/figures/turbostream-fig8.png)" in text
    assert "**Reproduces: partly** — ✓ a; ✗ b" in text
    assert "elastream bench ipc --quick" in text and "**Scaled to this machine.** 2 sizes." in text
    pending = text.split("## Not yet measured")[1]
    assert "**ibm fig8** (1,000 operators)" in pending and "not available yet: needs Runner(model=...)" in pending
    assert "## Failed runs" in text and "`ValueError: boom`" in text
    assert text.index("| IBM Streams") < text.index("| TurboStream") < text.index("| Scaling ordered")  # registry order


def test_command_end_to_end_on_figures_that_need_no_measurement(tmp_path, capsys, monkeypatch):
    from elastream.bench import _figures_haren

    def cannot_measure(scenario, quick, extra=None):
        raise NotAvailable("not available yet: stands in for a figure the engine cannot measure")

    monkeypatch.setattr(_figures_haren, "_run", cannot_measure)  # Haren's figures are measured now
    out, report = tmp_path / "figs", tmp_path / "REPORT.md"
    assert main(["bench", "figures", "--paper", "haren", "--figure", "fig4",
                 "--quick", "--out", str(out), "--report", str(report), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(r["paper"], r["figure"], r["status"]) for r in result["figures"]] == [("haren", "fig4", "not available")]
    assert sorted(p.name for p in out.iterdir()) == ["haren-fig4.json", "suite-runs.json"]
    text = report.read_text()
    assert "## Not yet measured" in text
    assert "by `elastream bench figures --paper haren --figure fig4 --quick`" in text


@pytest.mark.matrix
@pytest.mark.timeout(300)
def test_turbostream_quick_measures_for_real(tmp_path, capsys):
    """A real (slow, ~40 s) run of TurboStream's figures with --quick; deselected by default."""
    assert main(["bench", "figures", "--paper", "turbostream", "--quick", "--out", str(tmp_path),
                 "--report", str(tmp_path / "REPORT.md"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in result["figures"]] == ["measured"] * 3
    assert all((tmp_path / f"turbostream-fig{i}.png").exists() for i in (8, 9, 10))
