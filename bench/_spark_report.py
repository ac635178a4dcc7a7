"""Ratios, the goal check, the table and the plot of ``elastream bench spark`` (pure functions of its result).

Used from the benchmark's thread only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.bench._common import fmt


def with_ratios(targets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each query row gains ``native_ratio``: its steady-state tuples/s ÷ the native reference's on its target."""
    out = {}
    for name, target in targets.items():
        native = target["native"].get("steady_tuples_per_second")
        queries = {q: {**row, "native_ratio": _ratio(row.get("steady_tuples_per_second"), native)}
                   for q, row in target["queries"].items()}
        out[name] = {**target, "queries": queries}
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goal_check(result: dict[str, Any], tuples_per_second: float, native_ratio: float, scale: float) -> dict[str, Any]:
    """Whether every query on the local target reaches the goal's steady state and ratio (and at the goal's scale)."""
    goal = {"text": f"every query >= {tuples_per_second:,.0f} tuples/s in steady state at local[2] on scale-{scale:g} "
                    f"data, within {1 / native_ratio:g}x of the native reference (ratio >= {native_ratio:g})",
            "tuples_per_second": tuples_per_second, "native_ratio": native_ratio,
            "scale_is_the_goals": result["scale"] == scale}
    local = result["targets"].get("local")
    if local is None:
        return {**goal, "met": None, "why": "the local target did not run"}
    rows = local["queries"]
    slow = sorted(q for q, r in rows.items() if (r.get("steady_tuples_per_second") or 0) < tuples_per_second)
    far = sorted(q for q, r in rows.items() if (r.get("native_ratio") or 0) < native_ratio)
    steady = [r["steady_tuples_per_second"] for r in rows.values() if r.get("steady_tuples_per_second")]
    ratios = [r["native_ratio"] for r in rows.values() if r.get("native_ratio") is not None]
    return {**goal, "master": local["master"], "min_steady_tuples_per_second": min(steady, default=None),
            "min_native_ratio": min(ratios, default=None), "below_throughput": slow, "below_ratio": far,
            "streams_cut_to": result.get("stream_rows_cap"),
            "met": goal["scale_is_the_goals"] and not result.get("stream_rows_cap") and not slow and not far}


def print_tables(result: dict[str, Any], console: Console) -> None:
    """The results table (queries and the native reference per target) and the goal check."""
    targets = result["targets"]
    load = result["machine"]["load_average_1min"]
    cut = f", streams cut to {result['stream_rows_cap']:,} rows" if result.get("stream_rows_cap") else ""
    table = Table(title=f"Spark Structured Streaming, TPCx-BB SF {result['scale']:g}{cut} (tuples/s; latency ms; "
                        f"load average {load:.1f} at the end)")
    table.add_column("row")
    table.add_column("local engine", justify="right")
    for name, target in targets.items():
        table.add_column(f"{_where(name, target)}\nend to end", justify="right")
        table.add_column("steady", justify="right")
        table.add_column("p50 / p99", justify="right")
        table.add_column("÷ native", justify="right")
        table.add_column("match")
    for query in result["queries"]:
        cells = [query, fmt(result["local_engine"][query]["tuples_per_second"], 0)]
        for target in targets.values():
            cells += _spark_cells(target["queries"][query])
        table.add_row(*cells)
    native_cells = ["native keyed sum", "-"]
    for target in targets.values():
        native_cells += [*_spark_cells(target["native"], latency="batch")[:3], "1.00", _yes(target["native"])]
    table.add_row(*native_cells)
    console.print(table)
    console.print(_goal_line(result["goal"]))
    console.print("every Spark answer equals the local engine's; the native sums equal a plain loop's: "
                  f"{result['all_match']}")
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")


def _where(name: str, target: dict[str, Any]) -> str:
    """A target's column label: ``local[2]`` or ``cluster 2x1 cores``."""
    if name == "local":
        return str(target["master"])
    return f"cluster {target['workers']}x{target['cores_per_worker']} cores"


def _spark_cells(row: dict[str, Any], latency: str = "step") -> list[str]:
    """End to end, steady, p50 / p99 (marker round trips; batch durations for the native row), ratio, match."""
    p50, p99 = (row.get("p50_ms"), row.get("p99_ms")) if latency == "step" else (row["batch_p50_ms"],
                                                                                 row["batch_p99_ms"])
    return [fmt(row.get("tuples_per_second"), 0), fmt(row.get("steady_tuples_per_second"), 0),
            f"{fmt(p50, 0)} / {fmt(p99, 0)}", fmt(row.get("native_ratio"), 2), _yes(row)]


def _yes(row: dict[str, Any]) -> str:
    return "yes" if row.get("match") else "NO"


def _goal_line(goal: dict[str, Any]) -> str:
    if goal["met"] is None:
        return f"goal ({goal['text']}): not checked, {goal['why']}"
    verdict = "met" if goal["met"] else "NOT met"
    details = (f"slowest steady state {fmt(goal['min_steady_tuples_per_second'], 0)} tuples/s, smallest ratio to "
               f"native {fmt(goal['min_native_ratio'], 2)}")
    if not goal["scale_is_the_goals"]:
        details += "; not the goal's scale"
    if goal.get("streams_cut_to"):
        details += f"; streams cut to {goal['streams_cut_to']:,} rows (the goal asks for the whole streams)"
    return f"goal ({goal['text']}): {verdict} — {details}"


def save_plot(result: dict[str, Any], path: Path | None) -> str | None:
    """Bars of tuples/s per query (local engine end to end, Spark steady state per target, native), log scale."""
    if path is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [*result["queries"], "native"]
    series = {"local engine (end to end)": [result["local_engine"][q]["tuples_per_second"] for q in result["queries"]]
              + [None]}
    for name, target in result["targets"].items():
        rows = [target["queries"][q] for q in result["queries"]] + [target["native"]]
        series[f"Spark {_where(name, target)} (steady state)"] = [r.get("steady_tuples_per_second") for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, [v or 0 for v in values], width, label=name)
    goal = result["goal"]["tuples_per_second"]
    ax.axhline(goal, color="grey", linestyle="--", linewidth=1, label=f"goal: {goal:,.0f} tuples/s")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("tuples/s")
    cut = f", streams cut to {result['stream_rows_cap']:,} rows" if result.get("stream_rows_cap") else ""
    ax.set_title(f"TPCx-BB SF {result['scale']:g}{cut} on Spark Structured Streaming "
                 f"(load average {result['machine']['load_average_1min']:.1f})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
