"""Statistics snapshots and measurement helpers."""

from elastream.metrics.stats import FlowStats, OperatorStats, PortStats, WorkerStats

__all__ = ["FlowStats", "OperatorStats", "PortStats", "WorkerStats"]
