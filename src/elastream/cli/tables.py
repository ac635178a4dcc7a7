"""Rich tables of a :class:`~elastream.metrics.stats.FlowStats` snapshot.

A count that cannot apply reads "-": what a source takes in (it has no input;
it *emits* its records, in "tuples out"), what a sink sends on, the workers on
an operator no worker runs right now. Pure functions of a snapshot: safe to
call from any thread while a flow runs.
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


def _tuples_in(op: OperatorStats) -> str:
    return "-" if op.kind == "source" else f"{op.tuples_in:,}"


def _tuples_out(op: OperatorStats) -> str:
    return "-" if op.kind == "sink" else f"{op.tuples_out:,}"


def _count(n: int) -> str:
    return f"{n:,}" if n else "-"


def _state(op: OperatorStats) -> str:
    style = _STATE_STYLE.get(op.state, "")
    return f"[{style}]{op.state}[/]" if style else op.state


def live_table(stats: FlowStats, title: str = "") -> Table:
    """Operator states, workers, tuples in/out and input queue sizes of a running flow.

    "workers now" counts the worker threads running the operator at this
    instant ("-" between its activations), "most at once" the most that ever
    ran it together (above 1 only for an operator several workers share).
    """
    table = Table(title=title or f"running: {stats.elapsed_s:.1f} s, {stats.threads} threads, policy {stats.policy}")
    table.add_column("operator")
    table.add_column("state")
    for col in ("workers now", "most at once", "tuples in", "tuples out", "queued/capacity", "in rate /s"):
        table.add_column(col, justify="right")
    for op in stats.operators.values():
        table.add_row(op.name, _state(op), _count(op.workers), _count(op.peak_workers), _tuples_in(op),
                      _tuples_out(op), _queue(op), "-" if op.kind == "source" else f"{op.read_rate:,.0f}")
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
        table.add_row(op.name, op.kind, f"{op.activations:,}", f"{op.busy_s * 1e3:,.1f}", _tuples_in(op),
                      _tuples_out(op), f"{op.output_write_blocked_ratio:.3f}", f"{op.read_blocked_s:.3f}",
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
                                "peak_workers": op.peak_workers,
                                "write_blocked_ratio": op.output_write_blocked_ratio,
                                "read_blocked_s": op.read_blocked_s, "write_blocked_s": op.write_blocked_s}
                      for op in stats.operators.values()},
        "workers": [{"index": w.index, "busy_s": w.busy_s, "idle_s": w.idle_s, "dispatches": w.dispatches,
                     "utilisation": w.utilisation} for w in stats.workers],
    }
