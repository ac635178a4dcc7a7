"""Rich tables of a :class:`~elastream.metrics.stats.FlowStats` snapshot.

Pure functions of a snapshot: safe to call from any thread while a flow runs.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from elastream.metrics.stats import FlowStats, OperatorStats

_STATE_STYLE = {"running": "bold green", "ready": "cyan", "read_blocked": "yellow",
                "write_blocked": "red", "sleeping": "blue", "completed": "dim"}


def _queue(op: OperatorStats) -> str:
    if not op.inputs:
        return "-"
    return f"{sum(p.size for p in op.inputs):,}/{sum(p.capacity for p in op.inputs):,}"


def _state(op: OperatorStats) -> str:
    style = _STATE_STYLE.get(op.state, "")
    return f"[{style}]{op.state}[/]" if style else op.state


def live_table(stats: FlowStats, title: str = "") -> Table:
    """Operator states, tuples in/out and input queue sizes of a running flow."""
    table = Table(title=title or f"running: {stats.elapsed_s:.1f} s, {stats.threads} threads, policy {stats.policy}")
    table.add_column("operator")
    table.add_column("state")
    for col in ("workers (peak)", "tuples in", "tuples out", "queued/capacity", "in rate /s"):
        table.add_column(col, justify="right")
    for op in stats.operators.values():
        table.add_row(op.name, _state(op), f"{op.workers} ({op.peak_workers})", f"{op.tuples_in:,}",
                      f"{op.tuples_out:,}", _queue(op), f"{op.read_rate:,.0f}")
    return table


def operator_table(stats: FlowStats) -> Table:
    """Per-operator statistics of a run (C-Stream §3.2.6 counters)."""
    table = Table(title=f"operators ({stats.elapsed_s:.2f} s, {len(stats.workers)} worker threads, "
                        f"policy {stats.policy})")
    table.add_column("operator")
    table.add_column("kind")
    for col in ("activations", "busy ms", "tuples in", "tuples out", "write-blocked ratio",
                "read-blocked s", "write-blocked s"):
        table.add_column(col, justify="right")
    for op in stats.operators.values():
        table.add_row(op.name, op.kind, f"{op.activations:,}", f"{op.busy_s * 1e3:,.1f}", f"{op.tuples_in:,}",
                      f"{op.tuples_out:,}", f"{op.output_write_blocked_ratio:.3f}", f"{op.read_blocked_s:.3f}",
                      f"{op.write_blocked_s:.3f}")
    return table


def worker_table(stats: FlowStats) -> Table:
    """Per-worker busy/idle time and utilisation."""
    # Mean over every worker of the run (FlowStats.mean_utilisation counts live ones only).
    mean = sum(w.utilisation for w in stats.workers) / len(stats.workers) if stats.workers else 0.0
    table = Table(title=f"workers (mean utilisation {mean:.1%})")
    for col in ("worker", "busy s", "idle s", "dispatches", "utilisation"):
        table.add_column(col, justify="right")
    for w in stats.workers:
        table.add_row(str(w.index), f"{w.busy_s:.3f}", f"{w.idle_s:.3f}", f"{w.dispatches:,}",
                      f"{w.utilisation:.1%}")
    return table


def stats_dict(stats: FlowStats) -> dict[str, Any]:
    """A JSON-ready dict of the operator and worker counters shown in the tables."""
    return {
        "elapsed_s": stats.elapsed_s, "threads": stats.threads, "policy": stats.policy,
        "operators": {op.name: {"kind": op.kind, "state": op.state, "activations": op.activations,
                                "busy_ms": op.busy_s * 1e3, "tuples_in": op.tuples_in, "tuples_out": op.tuples_out,
                                "write_blocked_ratio": op.output_write_blocked_ratio,
                                "read_blocked_s": op.read_blocked_s, "write_blocked_s": op.write_blocked_s}
                      for op in stats.operators.values()},
        "workers": [{"index": w.index, "busy_s": w.busy_s, "idle_s": w.idle_s, "dispatches": w.dispatches,
                     "utilisation": w.utilisation} for w in stats.workers],
    }
