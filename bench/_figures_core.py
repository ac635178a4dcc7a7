"""The pieces every figure of ``elastream bench figures`` is made of.

A :class:`Figure` names a paper's figure, states the paper's claim in one
sentence, and brings four functions: ``run(quick)`` measures it by calling
existing benchmark modules (through :func:`bench_run`, never re-implementing
what a benchmark measures), ``table(data)`` turns the measured numbers into
rows, ``verdict(data)`` decides from those numbers whether the paper's shape
reproduces, and ``plot(data, path)`` draws a PNG. A figure that needs a
capability the engine lacks raises :class:`NotAvailable` from ``run``.
"""

from __future__ import annotations

import importlib
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Rows = list[list[Any]]


class NotAvailable(RuntimeError):
    """A figure that cannot be measured yet; the message says what it needs."""


@dataclass(frozen=True, slots=True)
class Table:
    """A figure's measured numbers: column names and rows of plain values."""

    columns: list[str]
    rows: Rows

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (see :func:`table_from_json`)."""
        return {"columns": self.columns, "rows": self.rows}


def table_from_json(raw: dict[str, Any] | None) -> Table:
    """The :class:`Table` a figure's JSON stored (an empty one when there is none)."""
    if not raw:
        return Table([], [])
    return Table(list(raw["columns"]), [list(r) for r in raw["rows"]])


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the paper's shape reproduces ("yes", "no", "partly") and why, from the measured numbers."""

    reproduces: str
    why: str

    def to_json(self) -> dict[str, str]:
        """A JSON-ready form."""
        return {"reproduces": self.reproduces, "why": self.why}


def verdict_of(checks: Sequence[tuple[str, bool | None]]) -> Verdict:
    """Combine named checks: all pass → yes, none → no, else partly; a None check could not be decided.

    Example: ``verdict_of([("a < b", True), ("c < d", False)]).reproduces == "partly"``
    """
    decided = [(text, ok) for text, ok in checks if ok is not None]
    if not decided:
        return Verdict("no", "nothing could be decided from the measured numbers: "
                             + "; ".join(text for text, _ in checks))
    passed = sum(ok for _, ok in decided)
    status = "yes" if passed == len(decided) else "no" if passed == 0 else "partly"
    why = "; ".join(f"{'✓' if ok else '✗' if ok is not None else '?'} {text}" for text, ok in checks)
    return Verdict(status, why)


@dataclass(frozen=True, slots=True)
class Figure:
    """One paper figure: the claim, how it is measured, tabulated, judged and drawn."""

    paper: str
    fig: str
    title: str
    claim: str
    run: Callable[[bool], dict[str, Any]]
    table: Callable[[dict[str, Any]], Table]
    verdict: Callable[[dict[str, Any]], Verdict]
    plot: Callable[[dict[str, Any], str], str]
    scaled: str = ""
    """How the experiment is scaled to this machine (threads, sizes, run lengths), for the report."""

    @property
    def key(self) -> str:
        """The file stem of this figure's JSON and PNG, e.g. ``c-stream-fig6``."""
        return f"{self.paper}-{self.fig}"


def bench_run(name: str, argv: list[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run benchmark ``name`` with command-line options ``argv`` in this process; its result with "command".

    ``extra`` sets attributes no command line has (e.g. ``progress=False`` for a benchmark that would draw
    a progress bar of its own under the suite's).
    """
    from elastream.cli.bench import benchmark_parser

    module = importlib.import_module(f"elastream.bench.{name}")
    args = benchmark_parser(name, module).parse_args(argv)
    for key, value in (extra or {}).items():
        setattr(args, key, value)
    result = module.run(args)
    result["command"] = shlex.join(["elastream", "bench", name, *argv])  # copy-pasteable ("dynamic t2")
    return result


def commands_in(data: Any, depth: int = 3) -> list[str]:
    """Every benchmark command recorded in a figure's data (see :func:`bench_run`), in order, once each."""
    found: list[str] = []
    if depth < 0:
        return found
    if isinstance(data, dict):
        if isinstance(data.get("command"), str):
            found.append(data["command"])
        for value in data.values():
            found += commands_in(value, depth - 1)
    elif isinstance(data, list):
        for value in data:
            found += commands_in(value, depth - 1)
    return list(dict.fromkeys(found))


def not_available(reason: str) -> Callable[[bool], dict[str, Any]]:
    """A runner for a figure that cannot be measured yet: it raises :class:`NotAvailable` with ``reason``."""
    def run(quick: bool) -> dict[str, Any]:
        raise NotAvailable(reason)
    return run


def no_table(data: dict[str, Any]) -> Table:
    """The table of a figure never measured."""
    return Table([], [])


def no_verdict(data: dict[str, Any]) -> Verdict:
    """The verdict of a figure never measured."""
    return Verdict("no", "not measured")


def no_plot(data: dict[str, Any], path: str) -> str:
    """A figure never measured draws nothing."""
    return ""


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, so strict JSON (``allow_nan=False``) accepts it."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def rounded(value: Any, digits: int = 3) -> Any:
    """A table cell: floats to ``digits`` significant places, everything else as is."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if abs(value) < 10 ** digits else round(value)
    return value


def new_axes(ncols: int = 1, width: float = 5.5, height: float = 4.0) -> tuple[Any, list[Any]]:
    """A matplotlib figure (Agg backend) with ``ncols`` side-by-side axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes.flat)


def save(fig: Any, path: str, title: str) -> str:
    """Title, lay out and write ``fig`` to ``path`` (PNG); return ``path``."""
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def lines(ax: Any, series: dict[str, tuple[list[float], list[float | None]]], xlabel: str, ylabel: str,
          logx: bool = False) -> None:
    """One line per named series of (xs, ys) on ``ax``; missing ys are gaps."""
    for label, (pts, ys) in series.items():
        ax.plot(pts, [float("nan") if y is None else y for y in ys], marker="o", label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if logx:
        xs = sorted({x for pts, _ in series.values() for x in pts})
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_ylim(bottom=0)
    if series:
        ax.legend(fontsize="small")
