"""The PNG of ``elastream bench haren``: one panel per measured scenario (Figs. 4, 5, 8-9 shapes)."""

from __future__ import annotations

from typing import Any

from elastream.bench._figures_core import lines, new_axes, save


def plot(result: dict[str, Any], path: str) -> str:
    """Draw every scenario ``result`` holds into ``path``; return ``path``."""
    panels = [p for p in (_synthetic_panels(result), _overhead_panel(result), _multiclass_panel(result))
              if p is not None]
    flat = [panel for group in panels for panel in (group if isinstance(group, list) else [group])]
    fig, axes = new_axes(max(1, len(flat)), width=4.5, height=3.6)
    for ax, draw in zip(axes, flat):
        draw(ax)
    return save(fig, path, "Haren (§7), 2 cores, Busy operators with the GIL released")


def _synthetic_panels(result: dict[str, Any]) -> list | None:
    rows = result.get("synthetic")
    if not rows:
        return None
    configs = list(dict.fromkeys(r["config"] for r in rows))
    counts = sorted({r["queries"] for r in rows})

    def panel(key: str, label: str):
        def draw(ax: Any) -> None:
            series = {c: (counts, [next((r[key] for r in rows if (r["config"], r["queries"]) == (c, n)), None)
                                   for n in counts]) for c in configs}
            lines(ax, series, "queries", label)
            ax.set_title(label)
        return draw

    return [panel("throughput_tps", "tuples/s"), panel("mean_latency_s", "mean latency s"),
            panel("max_latency_s", "max latency s")]


def _overhead_panel(result: dict[str, Any]):
    rows = result.get("overhead")
    if not rows:
        return None

    def draw(ax: Any) -> None:
        keys = sorted({(r["policy"], r["period_s"]) for r in rows})
        counts = sorted({r["queries"] for r in rows})
        series = {f"{p} P={period:g}s": (counts, [next((100 * r["total"] for r in rows
                                                       if (r["policy"], r["period_s"], r["queries"]) == (p, period, n)),
                                                      None) for n in counts]) for p, period in keys}
        lines(ax, series, "queries", "T_S total, % of worker time")
        ax.set_title("scheduling task overhead")
    return draw


def _multiclass_panel(result: dict[str, Any]):
    data = result.get("multiclass2") or result.get("multiclass1")
    if not data:
        return None

    def draw(ax: Any) -> None:
        series = {}
        for r in data["rows"]:
            for klass, s in r["classes"].items():
                pts = s["max_latency_series"]
                series[f"{r['config']} {klass}"] = ([t for t, _ in pts], [v for _, v in pts])
        lines(ax, series, "run time s", "max latency s (per second)")
        ax.set_title(f"Multi-class scenario {data['rows'][0]['scenario']}")
    return draw
