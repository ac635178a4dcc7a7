"""The suite's own wall time: each ``elastream bench figures`` run records it, the report sums it.

A run appends one record to ``<out>/suite-runs.json`` — when it started (the
``run`` id its figure JSONs carry in ``measured``), its commit, whether it was
``--quick``, the figures it measured and its wall time from its start to its
report step. The report sums the records of the runs that measured the figures
now in ``<out>`` (papers run one at a time add up), so its first line says how
long the whole suite took. Records of runs whose figures have all been measured
again since are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RUNS_FILE = "suite-runs.json"


def load_runs(out_dir: Path) -> list[dict[str, Any]]:
    """The run records in ``out_dir`` (none when the file is missing or unreadable)."""
    try:
        raw = json.loads((out_dir / RUNS_FILE).read_text())
    except (OSError, ValueError):
        return []
    runs = raw.get("runs") if isinstance(raw, dict) else None
    return [r for r in runs or [] if isinstance(r, dict) and "run" in r and "wall_s" in r]


def figure_runs(results: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    """Figure key → the id of the run that measured it (None for a figure measured before runs had ids)."""
    return {f"{r['paper']}-{r['figure']}": (r.get("measured") or {}).get("run") for r in results}


def record_run(out_dir: Path, run: dict[str, Any], results: Sequence[dict[str, Any]]) -> None:
    """Add ``run`` to ``out_dir``'s records, keeping only runs some figure in ``results`` still comes from."""
    live = set(figure_runs(results).values()) | {run["run"]}
    runs = [r for r in load_runs(out_dir) if r["run"] in live and r["run"] != run["run"]] + [run]
    runs.sort(key=lambda r: r["run"])
    (out_dir / RUNS_FILE).write_text(json.dumps({"runs": runs}, indent=1) + "\n")


def suite_wall(results: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]],
               keys: Sequence[str]) -> dict[str, Any]:
    """What the figures in ``results`` cost: the runs that measured them, their summed wall time, what is unknown.

    ``keys`` are the registry's figures; ``whole`` says whether every one of them has a result from a recorded run.
    """
    by_id = {r["run"]: r for r in runs}
    measured_by = figure_runs(results)
    used = sorted({i for i in measured_by.values() if i in by_id})
    unknown = sorted(k for k, i in measured_by.items() if i not in by_id)
    missing = sorted(set(keys) - set(measured_by))
    chosen = [by_id[i] for i in used]
    return {"total_s": sum(r["wall_s"] for r in chosen), "runs": chosen, "unknown": unknown, "missing": missing,
            "whole": bool(chosen) and not unknown and not missing}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def wall_line(wall: dict[str, Any]) -> str:
    """The report's first paragraph: how long the suite (or the figures present) took, when and at which commit.

    Example: "**The whole suite took 52.3 min** on 2026-11-27 at `abc1234` (full settings): 5 runs of …"
    """
    runs = wall["runs"]
    if not runs:
        return ("**The suite's wall time is unknown**: the figures below were measured by runs of "
                "`elastream bench figures` that recorded none.")
    dates = sorted({r["run"][:10] for r in runs})
    commits = list(dict.fromkeys(r["commit"] for r in runs))
    quick = {bool(r.get("quick")) for r in runs}
    settings = "--quick" if quick == {True} else "full settings" if quick == {False} else "a mix of --quick and full"
    what = "The whole suite took" if wall["whole"] else "The figures below took"
    parts = "; ".join(f"{', '.join(r.get('papers') or ['?'])} {_minutes(r['wall_s'])}" for r in runs)
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    text = (f"**{what} {_minutes(wall['total_s'])}** on {when} at "
            f"{', '.join(f'`{c}`' for c in commits)} ({settings}): the wall time of {len(runs)} run"
            f"{'s' if len(runs) != 1 else ''} of `elastream bench figures`, each from its start to its report "
            f"({parts}).")
    if wall["unknown"]:
        text += f" Not counted (measured before runs recorded their time): {', '.join(wall['unknown'])}."
    if wall["missing"]:
        text += f" Not measured here: {', '.join(wall['missing'])}."
    return text
