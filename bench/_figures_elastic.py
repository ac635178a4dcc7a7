"""Elastic figures for ``elastream bench figures``: C-Stream Figs. 9–11 and IBM Fig. 10 from ``bench elastic``.

Each is one ``bench elastic`` shape with the GIL held (pure-Python operators, the
case where worker processes, not threads, add cores). The paper's x axis (the
busy cost) becomes the shape's load phases (the cost changes mid-run), and
"elastic matches the best manual setting" becomes elastic ÷ best static per
phase. ``--quick`` uses short phases (7 elastic periods) and a static sweep
of threads on 2 processes with fusion on; the full run has phases of 30
periods (issue 20's minimum) and sweeps threads × fusion on 2 processes (where
every best static run was in the last full matrix over 1 and 2 processes).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from elastream.bench._figures_core import Figure, Table, Verdict, bench_run, new_axes, rounded, save, verdict_of

#: Elastic ÷ best static a phase must reach to count as matching it.
MATCH = 0.9
#: Elastic periods per load phase in the full run: issue 20's minimum for a steady state after each change.
FULL_PHASE_PERIODS = 30
#: Periods a phase with --quick (phase length × runs is nearly all these figures' time): the elastic runs of the
#: last full run settled within two periods of a change, so most of a phase is still steady state.
QUICK_PHASE_PERIODS = 7
SCALE = ("GIL held (pure-Python operators: worker processes, not threads, add cores); the paper's separate runs per "
         "cost become load phases of one run; 1 repeat; --quick: 7 elastic periods a phase, a static sweep of "
         "threads 1–2 on 2 processes with fusion on; full: 30 periods a phase (issue 20's minimum), a static sweep "
         "of threads 1–2 × fusion on/off on 2 processes (and the busy operators replicated over 2 processes on the "
         "chains). One process is left out of the static sweep: with the GIL held a second process adds a core, "
         "and in the last full sweep with it (de7426c) no 1-process configuration was the best static one in any "
         "phase of any shape.")


def _argv(shape: str, quick: bool, png_dir: str) -> list[str]:
    common = ["--shape", shape, "--gil", "hold", "--repeats", "1", "--png", png_dir]
    if quick:
        return common + ["--phase-periods", str(QUICK_PHASE_PERIODS), "--threads", "1", "2", "--processes", "2",
                         "--fuse", "on"]
    return common + ["--phase-periods", str(FULL_PHASE_PERIODS), "--threads", "1", "2", "--processes", "2",
                     "--fuse", "on", "off"]


def run_shape(shape: str, quick: bool) -> dict[str, Any]:
    """``bench elastic`` on one shape; the plain ``Runner()`` timeline PNG is kept beside the figure."""
    png_dir = tempfile.mkdtemp(prefix="elastream-figures-")
    try:
        result = bench_run("elastic", _argv(shape, quick, png_dir))
        timeline = _timeline_png(result)
        data: dict[str, Any] = {"elastic": result}
        if timeline:
            data["_extra_png"] = {"timeline": Path(timeline).read_bytes()}
        return data
    finally:
        shutil.rmtree(png_dir, ignore_errors=True)


def _timeline_png(result: dict[str, Any]) -> str | None:
    for shape in result["shapes"]:
        path = shape.get("png", {}).get("elastic")
        if path and Path(path).exists():
            return path
    return None


def _summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    return data["elastic"]["shapes"][0]["summary"]


def table_shape(data: dict[str, Any]) -> Table:
    """Per phase: the best static configuration, then each elastic one against it."""
    rows = []
    for phase in _summary(data):
        rows.append([phase["phase"], f"best static: {phase['best_static']}",
                     rounded(phase["best_static_tuples_per_s"]), 1.0, "", ""])
        for e in phase["elastic"]:
            rows.append([phase["phase"], e["config"], rounded(e["steady_tuples_per_s"]),
                         rounded(e["ratio_to_best_static"]), rounded(e["converge_periods"]),
                         f"{e['converged_runs']}/{e['runs']}"])
    return Table(["phase", "configuration", "steady tuples/s", "÷ best static", "periods to converge", "converged"],
                 rows)


def _ratios(data: dict[str, Any], config: str) -> list[float | None]:
    return [next((e["ratio_to_best_static"] for e in p["elastic"] if e["config"] == config), None)
            for p in _summary(data)]


def _match_check(data: dict[str, Any], config: str) -> tuple[str, bool | None]:
    ratios = _ratios(data, config)
    known = [r for r in ratios if r is not None]
    shown = ", ".join("-" if r is None else f"{r:.2f}" for r in ratios)
    ok = sum(r >= MATCH for r in known)
    text = f"{config}: ≥ {MATCH:g} of the best static in {ok} of {len(ratios)} phases ({shown})"
    if not known:
        return text, None
    return text, ok == len(ratios)


def _errors_check(data: dict[str, Any]) -> tuple[str, bool]:
    runs = data["elastic"]["shapes"][0]["runs"]
    bad = [r["config"] for r in runs if "error" in r or r.get("check")]
    return f"every run finished with its output checked ({len(bad)} failed{': ' + ', '.join(bad) if bad else ''})", \
        not bad


def verdict_elastic(data: dict[str, Any]) -> Verdict:
    """Plain ``Runner()`` reaches 0.9 of the best static configuration in every load phase."""
    return verdict_of([_match_check(data, "elastic"), _errors_check(data)])


def verdict_fig11(data: dict[str, Any]) -> Verdict:
    """C-Stream Fig. 11: U_h = 0.90 reaches the best throughput; more aggressive than 0.95."""
    loaded = _summary(data)[-1]
    by = {e["config"]: e for e in loaded["elastic"]}
    u90 = by.get("elastic utilization U_h=0.90", {}).get("steady_tuples_per_s")
    u95 = by.get("elastic utilization U_h=0.95", {}).get("steady_tuples_per_s")
    r90 = by.get("elastic utilization U_h=0.90", {}).get("ratio_to_best_static")
    return verdict_of([
        (f"loaded phase: the utilization controller with U_h = 0.90 reaches {rounded(r90) if r90 else '-'} of the "
         f"best static (≥ {MATCH:g})", None if r90 is None else r90 >= MATCH),
        (f"loaded phase: U_h = 0.90 gives ≥ the throughput of U_h = 0.95 ({rounded(u90)} vs {rounded(u95)})",
         None if u90 is None or u95 is None else u90 >= 0.98 * u95),
        _match_check(data, "elastic"), _errors_check(data)])


def plot_shape(data: dict[str, Any], path: str, title: str) -> str:
    """Bars per load phase: the best static configuration and each elastic one (steady tuples/s)."""
    summary = _summary(data)
    labels = ["best static"] + [e["config"] for e in summary[0]["elastic"]]
    fig, (ax,) = new_axes(1, width=max(6.0, 1.6 * len(labels) * len(summary) / 2))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        ys = [p["best_static_tuples_per_s"] if i == 0 else
              next((e["steady_tuples_per_s"] for e in p["elastic"] if e["config"] == label), None) for p in summary]
        ax.bar([p["phase"] + i * width for p in summary], [y or 0 for y in ys], width, label=label)
    costs = data["elastic"]["shapes"][0].get("costs_us") or []
    names = [f"phase {p['phase']}" + (f": {'/'.join(f'{c:g}' for c in sorted(set(costs[p['phase']])))} µs"
                                      if p["phase"] < len(costs) else "") for p in summary]
    ax.set(xlabel="load phase (busy cost per tuple)", ylabel="steady tuples/s",
           xticks=[p["phase"] + 0.4 - width / 2 for p in summary], xticklabels=names)
    ax.legend(fontsize="small")
    return save(fig, path, title)


def _figure(paper: str, fig: str, shape: str, title: str, claim: str, verdict: Any = verdict_elastic) -> Figure:
    return Figure(paper, fig, title, claim, lambda quick: run_shape(shape, quick), table_shape, verdict,
                  lambda d, p: plot_shape(d, p, f"{paper} {fig} ({shape}, GIL held): elastic vs best static"), SCALE)


def figures() -> list[Figure]:
    """C-Stream Figs. 9–11 and IBM Fig. 10."""
    return [
        _figure("c-stream", "fig9", "cstream-fig9", "Adaptation, 1 busy operator",
                "As the busy operator's cost rises, elastic adaptation adds threads and replicas and keeps the "
                "throughput stable, where a single thread and replica drop."),
        _figure("c-stream", "fig10", "cstream-fig10", "Adaptation, 2 busy operators",
                "With two equally costly busy operators, adaptation replicates both in turn and keeps a stable "
                "throughput as their cost rises."),
        _figure("c-stream", "fig11", "cstream-fig11", "Adaptation, data-parallel",
                "On the data-parallel topology, the adaptation's final throughput reaches the best of the "
                "fixed thread counts, and U_h = 0.90 adds threads more aggressively than 0.95 and gets the "
                "maximum.", verdict_fig11),
        _figure("ibm", "fig10", "ibm-fig10", "Individual elasticity runs: throughput and active threads",
                "The elasticity algorithm ramps the thread level up, backs off, and settles on a level whose "
                "throughput matches the best static thread count."),
    ]
