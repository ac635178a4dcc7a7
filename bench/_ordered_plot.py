"""``elastream bench ordered --plot PNG``: one matplotlib panel per measured section.

Panels, in order (only those measured): data-structure Fig. 12 / 13 / 9 / 10,
engine Fig. 12 / 13 / 9 / 10, and the Fig. 8 heuristics (throughput and p99
latency vs threads). Called from the benchmark's thread after the runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Panel = Callable[[Any, dict[str, Any]], None]


def _scheme_lines(ax: Any, rows: list[dict[str, Any]], x: str, y: str) -> None:
    """Throughput vs workers, one line per reorder scheme (and emit cost or batch size, where they vary)."""
    extras = [(k, label) for k, label in (("emit_cost_us", "emit {:g} µs"), ("batch_size", "batch {}"))
              if len({r.get(k) for r in rows}) > 1]

    def line_of(r: dict[str, Any]) -> str:
        return ", ".join([r["scheme"], *(label.format(r[k]) for k, label in extras)])

    for line in dict.fromkeys(map(line_of, rows)):
        mine = [r for r in rows if line_of(r) == line]
        ax.plot([r[x] for r in mine], [r[y] for r in mine], marker="o", label=line)
    ax.set(xlabel=x, ylabel=y.replace("_", " "), xticks=sorted({r[x] for r in rows}))
    ax.set_ylim(bottom=0)


def _latency_of(run: dict[str, Any]) -> float:
    """Mean latency (ms) of a data-structure or engine partitioned run."""
    if "mean_latency_ms" in run:
        return run["mean_latency_ms"]
    return (run.get("latency") or {}).get("mean_ms", math.nan)


def _skew(ax: Any, section: dict[str, Any]) -> None:
    rows = section["results"]
    for scheme in ("hybrid", "partitioned"):
        ax.plot([r["sigma"] for r in rows], [r[scheme]["throughput_tuples_per_s"] for r in rows], marker="o",
                label=scheme)
    ax.set(xlabel="σ (larger = less skew)", ylabel="tuples/s", xscale="log")
    ax.set_ylim(bottom=0)


def _latency(ax: Any, section: dict[str, Any]) -> None:
    """Mean latency vs cost, one line per scheme (and batch size, where there are several)."""
    rows = section["results"]
    batches = list(dict.fromkeys(r.get("batch_size") for r in rows))
    for batch in batches:
        mine = [r for r in rows if r.get("batch_size") == batch]
        for scheme in ("hybrid", "partitioned"):
            label = scheme if len(batches) == 1 else f"{scheme}, batch {batch}"
            ax.plot([r["cost_us"] for r in mine], [_latency_of(r[scheme]) for r in mine], marker="o", label=label)
    ax.set(xlabel="per-tuple cost (µs)", ylabel="mean latency (ms)", xscale="log", yscale="log")


def _heuristics(ax: Any, rows: list[dict[str, Any]], y: Callable[[dict[str, Any]], float], ylabel: str) -> None:
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        ax.plot([r["threads"] for r in mine], [y(r) for r in mine], marker="o", label=policy)
    ax.set(xlabel="threads", ylabel=ylabel, xticks=sorted({r["threads"] for r in rows}))


PANELS: tuple[tuple[str, str, Panel], ...] = (
    ("light", "data structures: light (Fig. 12)",
     lambda ax, s: _scheme_lines(ax, s["results"], "workers", "throughput_tuples_per_s")),
    ("pipeline", "data structures: pipeline (Fig. 13)",
     lambda ax, s: _scheme_lines(ax, s["results"], "workers", "throughput_inputs_per_s")),
    ("skew", "data structures: skew (Fig. 9)", lambda ax, s: _skew(ax, s)),
    ("latency", "data structures: latency (Fig. 10)", lambda ax, s: _latency(ax, s)),
    ("engine-light", "engine: light (Fig. 12)",
     lambda ax, s: _scheme_lines(ax, s["results"], "threads", "throughput_tuples_per_s")),
    ("engine-pipeline", "engine: pipeline (Fig. 13)",
     lambda ax, s: _scheme_lines(ax, s["results"], "threads", "throughput_inputs_per_s")),
    ("engine-skew", "engine: skew (Fig. 9)", lambda ax, s: _skew(ax, s)),
    ("engine-latency", "engine: processing latency (Fig. 10)", lambda ax, s: _latency(ax, s)),
    ("heuristics", "engine: heuristics throughput (Fig. 8a)",
     lambda ax, s: _heuristics(ax, s["results"], lambda r: r["throughput_inputs_per_s"], "inputs/s")),
    ("heuristics", "engine: heuristics p99 latency (Fig. 8b)",
     lambda ax, s: _heuristics(ax, s["results"], lambda r: (r["latency"] or {}).get("p99_ms", math.nan),
                               "p99 latency (ms)")),
)


def plot(result: dict[str, Any], path: str) -> str:
    """Draw a panel per measured section of ``result`` into ``path`` (PNG); return ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [(title, draw, result[key]) for key, title, draw in PANELS if key in result]
    cols = 2
    rows = max(1, math.ceil(len(chosen) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(11, 4 * rows), squeeze=False, layout="constrained")
    for ax, (title, draw, section) in zip(axes.flat, chosen):
        draw(ax, section)
        ax.set_title(title)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(chosen):]:
        ax.set_visible(False)
    load = f"{result.get('load_average_1min_start', math.nan):.2f} → {result['machine']['load_average_1min']:.2f}"
    fig.suptitle(f"ordered-multicore §7 shapes, GIL release (1-min load {load})")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
