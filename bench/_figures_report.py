"""``bench/REPORT.md`` from the figure JSON files that ``elastream bench figures`` writes.

The report is generated, never edited: per paper and figure, the paper's
claim, the commands that measured it, a table of the measured numbers, the
PNG, and the computed verdict; then the figures not yet measured with the
reason, and any that failed with the error. It is built from every figure
JSON in the output directory, so running one paper refreshes that paper's
sections and keeps the others' (each says when and on which commit it was
measured). Its first line is the suite's wall time, summed over the runs
that measured the figures present (see ``_figures_wall``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elastream.bench._figures_wall import load_runs, suite_wall, wall_line

PAPERS = {
    "c-stream": "C-Stream (Şahin & Gedik), §5.1–5.2",
    "ibm": "IBM Streams elastic scheduler (Schneider & Wu), §5",
    "turbostream": "TurboStream (Wu et al.), §VI",
    "ordered": "Scaling ordered stream processing on shared-memory multicores (Prasaad et al.), §7",
    "haren": "Haren (Palyvos-Giannas et al.), §7",
}
MEASURED, NOT_AVAILABLE, FAILED = "measured", "not available", "failed"


def load_results(out_dir: Path) -> list[dict[str, Any]]:
    """Every figure JSON in ``out_dir`` (files named ``<paper>-<fig>.json``)."""
    results = []
    for path in sorted(out_dir.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and {"paper", "figure", "status"} <= raw.keys():
            results.append(raw)
    return results


def ordered_like(results: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """``results`` in the order of ``keys`` (the registry's), unknown ones last."""
    rank = {k: i for i, k in enumerate(keys)}
    return sorted(results, key=lambda r: (rank.get(f"{r['paper']}-{r['figure']}", len(rank)), r["paper"],
                                          r["figure"]))


def md_cell(value: Any) -> str:
    """A markdown table cell: numbers with thousands separators, pipes escaped, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"
    return str(value).replace("|", "\\|")


def md_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table: columns of numbers right-aligned, the others left-aligned."""
    def numeric(i: int) -> bool:
        values = [row[i] for row in rows if i < len(row) and row[i] not in (None, "")]
        return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    head = "| " + " | ".join(md_cell(c) for c in columns) + " |"
    rule = "|" + "|".join("---:" if numeric(i) else ":---" for i in range(len(columns))) + "|"
    body = ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def header(meta: dict[str, Any]) -> str:
    """The suite's wall time first (when known), then where and when: machine facts, date, commit, the command."""
    m = meta["machine"]
    gil = "enabled" if m.get("gil_enabled", True) else "disabled (free-threaded build)"
    wall = f"{meta['wall']}\n\n" if meta.get("wall") else ""
    return (f"# Paper figures, measured on elastream\n\n{wall}"
            f"Generated {meta['generated']} by `{meta['command']}` at commit `{meta['commit']}` on {m['cpus']} cores, "
            f"Python {m['python']}, GIL {gil} (1-min load average {m['load_average_1min']:.2f} at the end). "
            f"Every number, table, plot and verdict below is written by `elastream bench figures` from the figure "
            f"JSON files in `{meta['out_rel']}/` (each figure names the command and commit that measured it); "
            f"nothing is typed by hand. The papers ran on many-core servers; here every "
            f"experiment is scaled to this machine (fewer threads, shorter runs; each figure says how). A verdict "
            f"compares the *shape* of the paper's result — who wins, what rises or falls — not its absolute "
            f"numbers.\n")


def summary(results: Sequence[dict[str, Any]]) -> str:
    """One row per figure: paper, figure, verdict."""
    rows = []
    for r in results:
        verdict = (r.get("verdict") or {}).get("reproduces", "-") if r["status"] == MEASURED else r["status"]
        rows.append([PAPERS.get(r["paper"], r["paper"]).split(",")[0], r["figure"], r["title"], verdict])
    return "## Summary\n\n" + md_table(["paper", "figure", "experiment", "reproduces"], rows)


def figure_section(r: dict[str, Any], report_dir: Path, out_dir: Path) -> str:
    """A measured figure: claim, commands, table, PNG(s), verdict."""
    m = r.get("measured", {})
    lines = [f"### {r['paper']} {r['figure']}: {r['title']}", "",
             f"**Paper's claim.** {r['claim']}", ""]
    if r.get("scaled"):
        lines += [f"**Scaled to this machine.** {r['scaled']}", ""]
    lines += [f"**Command.** `{r['command']}` (measured {m.get('date', '?')} at `{m.get('commit', '?')}`, "
              f"{r.get('wall_s', 0):.0f} s); it ran:", "", "```"]
    lines += r.get("bench_commands") or ["(no benchmark command recorded)"]
    lines += ["```", ""]
    table = r.get("table") or {}
    if table.get("rows"):
        lines += [md_table(table["columns"], table["rows"]), ""]
    for png in [r.get("png"), *(r.get("extra_png") or {}).values()]:
        if png:
            rel = os.path.relpath(out_dir / png, report_dir)
            lines += [f"![{r['paper']} {r['figure']}]({Path(rel).as_posix()})", ""]
    v = r.get("verdict") or {"reproduces": "no", "why": "no verdict"}
    lines.append(f"**Reproduces: {v['reproduces']}** — {v['why']}")
    return "\n".join(lines)


def pending_section(results: Sequence[dict[str, Any]]) -> str:
    """Figures not measured yet (with the reason) and figures whose run failed (with the error)."""
    parts = []
    waiting = [r for r in results if r["status"] == NOT_AVAILABLE]
    failed = [r for r in results if r["status"] == FAILED]
    if waiting:
        parts.append("## Not yet measured\n\n" + "\n".join(
            f"- **{r['paper']} {r['figure']}** ({r['title']}). Claim: {r['claim']} — *{r['reason']}*" for r in waiting))
    if failed:
        parts.append("## Failed runs\n\n" + "\n".join(
            f"- **{r['paper']} {r['figure']}** ({r['title']}): `{r['reason']}`" for r in failed))
    return "\n\n".join(parts)


def render(results: Sequence[dict[str, Any]], meta: dict[str, Any], report_dir: Path, out_dir: Path) -> str:
    """The whole REPORT.md text."""
    parts = [header(meta), summary(results)]
    for paper, title in PAPERS.items():
        mine = [r for r in results if r["paper"] == paper and r["status"] == MEASURED]
        if mine:
            parts.append(f"## {title}\n\n" + "\n\n".join(figure_section(r, report_dir, out_dir) for r in mine))
    pending = pending_section(results)
    if pending:
        parts.append(pending)
    return "\n\n".join(parts) + "\n"


def write_report(path: Path, out_dir: Path, meta: dict[str, Any], keys: Sequence[str]) -> Path:
    """Render every figure JSON in ``out_dir`` into ``path`` (links relative to it); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    results = ordered_like(load_results(out_dir), keys)
    meta = {**meta, "out_rel": Path(os.path.relpath(out_dir, path.parent)).as_posix(),
            "wall": wall_line(suite_wall(results, load_runs(out_dir), keys))}
    path.write_text(render(results, meta, path.parent.resolve(), out_dir.resolve()))
    return path
