"""``elastream bench elastic`` on tiny settings: JSON keys, outputs checked, PNG and timeline written.

Behaviour only, never speed (the performance goals are read from the benchmark's own output).
"""

from __future__ import annotations

import json
from array import array
from types import SimpleNamespace

import pytest
from rich.console import Console

from elastream.bench import elastic as bench_elastic
from elastream.bench._elastic_flows import PhaseRecord
from elastream.bench._elastic_measure import check_output, convergence, drain_s, phase_windows, steady_rate
from elastream.cli.main import main
from elastream.runtime.decisions import Levels

pytestmark = [pytest.mark.timeout(120)]

TINY = ["--shape", "cstream-fig9", "--gil", "hold", "--phase-periods", "1", "--repeats", "1",
        "--threads", "1", "--processes", "1", "--fuse", "on", "--no-replicas"]


@pytest.mark.slow
def test_bench_elastic_json_checks_outputs_and_writes_png_and_timeline(tmp_path, capsys):
    timeline = tmp_path / "timeline.json"
    assert main(["bench", "elastic", *TINY, "--json", "--png", str(tmp_path), "--timeline", str(timeline)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "elastic" and result["phase_periods"] == 1 and result["repeats"] == 1
    [shape] = result["shapes"]
    assert shape["shape"] == "cstream-fig9" and shape["gil"] == "hold"
    assert [r["config"] for r in shape["runs"]] == ["elastic", "static t=1 p=1 fuse=on"]
    for run in shape["runs"]:
        assert "error" not in run and run["check"] is None and run["tuples"] > 0  # count and order held
        # a phase whose tuples all arrive after the source stopped is not measured (a loaded machine)
        assert [p["phase"] for p in run["phases"]] in ([0], [0, 1], [0, 1, 2])
        assert run["phases"][0]["steady_tuples_per_s"] > 0 and all(p["steady_tuples_per_s"] >= 0 for p in run["phases"])
    elastic_phase = shape["runs"][0]["phases"][0]
    assert {"converge_periods", "steady_changes_per_10", "max_pause_ms", "periods"} <= set(elastic_phase)
    for phase in shape["summary"]:
        assert phase["best_static"] == "static t=1 p=1 fuse=on"
        [elastic] = phase["elastic"]
        # (a later phase may see none of the elastic run's tuples on a loaded machine: no ratio then)
        assert elastic["ratio_to_best_static"] > 0 if phase["phase"] == 0 else elastic["ratio_to_best_static"] != 0
        assert {"converge_periods", "steady_changes_per_10", "max_pause_ms", "steady_levels"} <= set(elastic)
    png = shape["png"]["elastic"]
    assert png.endswith(".png") and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(timeline.read_text())["timelines"]
    assert list(saved) == ["cstream-fig9/hold/elastic"] and saved["cstream-fig9/hold/elastic"]["entries"]
    console = Console(record=True, width=200)
    bench_elastic.print_report(result, console)
    text = console.export_text()
    assert "best static: static t=1 p=1 fuse=on" in text and f"timeline PNG (elastic): {png}" in text


def _record(seqs: list[int], phases: list[int], batches: list[tuple[float, int]],
            source_end: float = 99.0) -> PhaseRecord:
    return PhaseRecord(array("q", seqs), array("b", phases), batches, source_end)


def test_check_output_names_a_lost_tuple_and_an_order_break():
    assert check_output(_record([0, 1, 2], [0, 0, 0], [(1.0, 3)]), 3, ordered=True) is None
    assert check_output(_record([0, 2, 1], [0, 0, 0], [(1.0, 3)]), 3, ordered=True) == \
        "out of order: position 1 holds tuple 2"
    assert check_output(_record([0, 2, 1], [0, 0, 0], [(1.0, 3)]), 3, ordered=False) is None
    assert check_output(_record([0, 1], [0, 0], [(1.0, 2)]), 3, ordered=False) == \
        "the sink got 2 tuples, the source emitted 3"
    assert "lost or duplicated" in check_output(_record([0, 0, 2], [0, 0, 0], [(1.0, 3)]), 3, ordered=False)


def test_phase_windows_and_steady_rate_per_phase():
    # phase 0: batches at 0.0 … 0.9; phase 1: batches at 1.1 … 2.0 (10 tuples each)
    record = _record(list(range(200)), [0] * 100 + [1] * 100,
                     [(0.1 * i, 10) for i in range(10)] + [(1.0 + 0.1 * i, 10) for i in range(1, 11)])
    w0, w1 = phase_windows(record)
    assert (w0.phase, w0.begin, w0.end, w0.tuples) == (0, 0.0, pytest.approx(1.1), 100)
    assert (w1.phase, w1.tuples) == (1, 100) and w1.end == pytest.approx(2.0)
    rate, span = steady_rate(record, w1, skip_s=0.45)
    assert span == pytest.approx(0.45) and rate == pytest.approx(50 / 0.45)  # batches at 1.6 … 2.0


def test_phase_windows_end_where_the_source_stopped():
    # the source stopped at t=1.5: phase 1's later arrivals are a backlog draining, not steady state
    batches = [(0.1 * i, 10) for i in range(10)] + [(1.0 + 0.1 * i, 10) for i in range(1, 11)]
    record = _record(list(range(200)), [0] * 100 + [1] * 100, batches, source_end=1.5)
    w0, w1 = phase_windows(record)
    assert w0.end == pytest.approx(1.1) and w1.end == 1.5 and w1.tuples == 50  # arrivals at 1.1 … 1.5
    assert drain_s(record) == pytest.approx(0.5)
    late = _record(list(range(20)), [0] * 10 + [1] * 10, [(0.5, 10), (2.0, 10)], source_end=1.0)
    assert [w.phase for w in phase_windows(late)] == [0]  # phase 1 arrived only after the source stopped


def _entry(threads: int) -> SimpleNamespace:
    return SimpleNamespace(levels=Levels(threads=(threads,)), pause_ms=None, at_s=0.0, period_s=0.5, decisions=())


def test_convergence_counts_periods_to_the_steady_level_and_its_changes():
    entries = [_entry(t) for t in (1, 2, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2)]
    c = convergence(entries)
    assert c["converge_periods"] == 3 and c["steady_changes_per_10"] == 0.0
    assert c["steady_levels"]["threads"] == [2] and c["level_changes"] == 3
    flapping = convergence([_entry(1 + i % 2) for i in range(12)])
    assert flapping["converge_periods"] is None
