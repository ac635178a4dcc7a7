"""``elastream bench figures``: the papers' headline experiments, scaled to this machine, and bench/REPORT.md.

A registry of figures (C-Stream Figs. 4–11, IBM Streams Figs. 8–10, TurboStream
Figs. 8–10, ordered-multicore Figs. 8–14, Haren) — each with the paper's claim,
a runner that calls the existing benchmark modules with scaled-down options, a
verdict computed from the measured numbers ("does the shape reproduce") and a
plot. Per figure, ``<out>/<paper>-<fig>.json`` and ``.png``; then the report is
regenerated from every figure JSON in ``<out>``. Figures that need what the
engine lacks are listed as "not yet measured", with the reason.

``--quick`` (about ten minutes on 2 cores) shortens every run; the full suite
takes under an hour. Each run records its wall time in ``<out>/suite-runs.json``
and the report opens with the sum over the runs that measured its figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import traceback
from pathlib import Path
from time import perf_counter
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from elastream.bench import (_figures_cstream, _figures_elastic, _figures_haren, _figures_ibm, _figures_ordered,
                             _figures_turbostream)
from elastream.bench._common import machine
from elastream.bench._figures_core import Figure, NotAvailable, commands_in, json_safe
from elastream.bench._figures_report import FAILED, MEASURED, NOT_AVAILABLE, PAPERS, load_results, write_report
from elastream.bench._figures_wall import load_runs, record_run, suite_wall, wall_line


def registry() -> list[Figure]:
    """Every figure, in report order: by paper, then figure."""
    figures = (_figures_cstream.figures() + _figures_elastic.figures() + _figures_ibm.figures()
               + _figures_turbostream.figures()
               + _figures_ordered.figures() + _figures_haren.figures())
    order = list(PAPERS)
    return sorted(figures, key=lambda f: (order.index(f.paper), int(f.fig.removeprefix("fig"))))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench figures``."""
    parser.add_argument("--paper", nargs="+", choices=list(PAPERS), default=None, metavar="PAPER",
                        help=f"papers to run (default all: {', '.join(PAPERS)})")
    parser.add_argument("--figure", nargs="+", default=None, metavar="FIG",
                        help="only these figures of the chosen papers (e.g. fig8 fig10)")
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat: about ten minutes in all")
    parser.add_argument("--out", default="bench/results/figures", help="directory of the figure JSON and PNG files")
    parser.add_argument("--report", default="bench/REPORT.md",
                        help="the generated report ('' to skip); built from every figure JSON in --out")


def chosen(args: argparse.Namespace) -> list[Figure]:
    """The figures the options select (a --figure that matches none fails with the known ones)."""
    figures = [f for f in registry() if args.paper is None or f.paper in args.paper]
    if args.figure:
        known = sorted({f.fig for f in figures}, key=lambda s: int(s.removeprefix("fig")))
        unknown = [x for x in args.figure if x not in known]
        if unknown:
            raise SystemExit(f"unknown figure(s) {', '.join(unknown)}; the chosen papers have: {', '.join(known)}")
        figures = [f for f in figures if f.fig in args.figure]
    return figures


def commit() -> str:
    """The checkout's short commit hash, with '+dirty' when bench/ or src/ have uncommitted changes.

    A link ``src/elastream/bench`` → ``bench`` (how a worktree without an install finds the benchmarks) is no change.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "bench/*.py",
                                ":(exclude)src/elastream/bench"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def command_line(figure: Figure, quick: bool) -> str:
    """The command that reproduces one figure."""
    return f"elastream bench figures --paper {figure.paper} --figure {figure.fig}" + (" --quick" if quick else "")


def invocation(args: argparse.Namespace) -> str:
    """The ``elastream bench figures`` command line of this run (the report's header names it)."""
    parts = ["elastream bench figures"]
    if args.paper:
        parts.append("--paper " + " ".join(args.paper))
    if args.figure:
        parts.append("--figure " + " ".join(args.figure))
    return " ".join(parts + (["--quick"] if args.quick else []))


def measure(figure: Figure, quick: bool, out: Path, stamp: dict[str, Any]) -> dict[str, Any]:
    """Run one figure; write its JSON (and PNG); return its record. Failures are recorded, never raised."""
    record: dict[str, Any] = {"paper": figure.paper, "figure": figure.fig, "title": figure.title,
                              "claim": figure.claim, "scaled": figure.scaled,
                              "command": command_line(figure, quick), "quick": quick,
                              "measured": stamp}
    began = perf_counter()
    try:
        data = figure.run(quick)
        extra = data.pop("_extra_png", {}) if isinstance(data, dict) else {}
        record.update(status=MEASURED, data=data, bench_commands=commands_in(data),
                      table=figure.table(data).to_json(), verdict=figure.verdict(data).to_json())
        record["png"] = Path(figure.plot(data, str(out / f"{figure.key}.png"))).name
        record["extra_png"] = write_extra(extra, out, figure.key)
    except NotAvailable as why:
        record.update(status=NOT_AVAILABLE, reason=str(why))
    except Exception as error:  # noqa: BLE001 - one failed figure must not lose the others
        record.update(status=FAILED, reason=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
    record["wall_s"] = perf_counter() - began
    text = json.dumps(json_safe(record), indent=1, allow_nan=False, default=str)
    (out / f"{figure.key}.json").write_text(text + "\n")
    return record


def write_extra(extra: dict[str, bytes], out: Path, key: str) -> dict[str, str]:
    """Write a figure's extra PNGs (e.g. an elastic timeline) as ``<key>-<name>.png``; their file names."""
    names = {}
    for name, content in extra.items():
        path = out / f"{key}-{name}.png"
        path.write_bytes(content)
        names[name] = path.name
    return names


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the chosen figures under a progress bar, record this run's wall time, then regenerate the report."""
    began = perf_counter()
    figures = chosen(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    stamp = {"date": now.isoformat(timespec="seconds"), "run": now.isoformat(timespec="microseconds"),
             "commit": commit(), "quick": args.quick, "machine": machine()}
    records = run_with_progress(figures, args.quick, out, stamp)
    wall_s = perf_counter() - began
    keys = [f.key for f in registry()]
    record_run(out, {"run": stamp["run"], "commit": stamp["commit"], "quick": args.quick,
                     "papers": list(dict.fromkeys(f.paper for f in figures)), "figures": [f.key for f in figures],
                     "wall_s": wall_s}, load_results(out))
    result: dict[str, Any] = {"benchmark": "figures", "quick": args.quick, "wall_s": wall_s,
                              "figures": records, "machine": machine(), "commit": stamp["commit"],
                              "suite": suite_wall(load_results(out), load_runs(out), keys)}
    if args.report:
        meta = {"generated": stamp["date"], "commit": stamp["commit"], "machine": result["machine"],
                "command": invocation(args)}
        result["report"] = str(write_report(Path(args.report), out, meta, keys))
    return result


def run_with_progress(figures: list[Figure], quick: bool, out: Path, stamp: dict[str, Any]) -> list[dict[str, Any]]:
    """Measure each figure in turn: one progress task per figure and one overall (on stderr)."""
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    records = []
    with Progress(*columns, console=console, redirect_stdout=False) as progress:
        overall = progress.add_task("all figures", total=len(figures))
        tasks = [progress.add_task(f"  {f.key}", total=1, start=False) for f in figures]
        for figure, task in zip(figures, tasks):
            progress.start_task(task)
            progress.update(task, description=f"  {figure.key}: {figure.title[:50]} …")
            record = measure(figure, quick, out, stamp)
            verdict = (record.get("verdict") or {}).get("reproduces") if record["status"] == MEASURED else None
            progress.update(task, completed=1,
                            description=f"  {figure.key}: {verdict or record['status']} ({record['wall_s']:.0f} s)")
            progress.advance(overall)
            records.append(record)
    return records


def print_report(result: dict[str, Any], console: Console) -> None:
    """Each measured figure's table, then one summary row per figure."""
    for r in result["figures"]:
        if r["status"] == MEASURED and r["table"]["rows"]:
            table = Table(title=f"{r['paper']} {r['figure']}: {r['title']}")
            for col in r["table"]["columns"]:
                table.add_column(str(col))
            for row in r["table"]["rows"]:
                table.add_row(*("-" if v is None else str(v) for v in row))
            console.print(table)
    summary = Table(title=f"paper figures ({'quick' if result['quick'] else 'full'}, {result['wall_s']:.0f} s, "
                          f"commit {result['commit']})")
    for col in ("paper", "figure", "reproduces", "why / reason", "s"):
        summary.add_column(col, justify="right" if col == "s" else "left", overflow="fold")
    for r in result["figures"]:
        verdict = r.get("verdict") or {}
        summary.add_row(r["paper"], r["figure"], verdict.get("reproduces", r["status"]),
                        verdict.get("why", r.get("reason", "")), f"{r['wall_s']:.0f}")
    console.print(summary)
    console.print(f"this run took {result['wall_s'] / 60:.1f} min")
    if result.get("suite"):
        console.print(wall_line(result["suite"]).replace("**", ""))
    if result.get("report"):
        console.print(f"report: {result['report']}")
