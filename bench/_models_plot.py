"""``elastream bench models --plot PNG``: IBM Streams Fig. 8–9's shape, one panel per (shape, GIL case).

Each panel groups the configurations by cost (flops per tuple), one bar per configuration, throughput
at the sink on a log scale (the costs differ by orders of magnitude, as in the paper).
"""

from __future__ import annotations

from typing import Any


def plot(result: dict[str, Any], path: str) -> str:
    """Draw the bars of every (shape, GIL case) side by side; return ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["results"]
    panels = list(dict.fromkeys((r["shape"], r["gil"]) for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (shape, gil) in zip(axes[0], panels):
        mine = [r for r in rows if r["shape"] == shape and r["gil"] == gil]
        costs = list(dict.fromkeys(r["flops"] for r in mine))
        width = 0.8 / len(configs)
        for k, config in enumerate(configs):
            rate = {r["flops"]: r["tuples_per_s"] for r in mine if r["config"] == config}
            xs = [i + (k - (len(configs) - 1) / 2) * width for i in range(len(costs))]
            ax.bar(xs, [max(rate.get(c, 0.0), 1e-3) for c in costs], width, label=config)
        ax.set_xticks(range(len(costs)), [f"{c:g}" for c in costs])
        ax.set(xlabel="flops per tuple", ylabel="tuples/s (work rate)", yscale="log",
               title=f"{shape}, 1,000 operators, GIL {gil}")
    axes[0][-1].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
