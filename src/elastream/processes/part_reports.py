"""What the parent makes of a worker part's reports: a failure as the user's OperatorError, an operator
not reported yet as zero statistics.

Threading: pure functions, called on the supervisor thread or the user's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from elastream.errors import ElastreamError, OperatorError
from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.processes.messages import Failed


class RemoteOperatorError(ElastreamError):
    """The original exception of an operator that failed in a worker process."""


def not_reported(name: str, op: Any) -> OperatorStats:
    """Statistics of operator ``name`` before its process has reported any (zero counts, ``ready``)."""
    return OperatorStats(
        name=name, kind=op.spec().kind, state="ready", activations=0, busy_s=0.0, read_blocked_s=0.0,
        write_blocked_s=0.0, tuples_in=0, tuples_out=0, last_scheduled=0.0, read_rate=0.0, write_rate=0.0,
        conjunctive_wait_fraction=0.0, disjunctive_wait_fraction=0.0, output_write_blocked_ratio=0.0)


def listing_every_operator(merged: FlowStats, listed: dict[str, Any], zero: dict[str, OperatorStats]) -> FlowStats:
    """``merged`` listing every operator of ``listed``: one not reported yet with zero counts, in state ``ready``.

    ``zero`` caches those zero entries (the same each time; a held worker never started never reports).
    """
    if len(merged.operators) == len(listed):
        return merged  # every part has reported
    operators = {name: merged.operators.get(name) or zero.get(name) or zero.setdefault(name, not_reported(name, op))
                 for name, op in listed.items()}
    return replace(merged, operators=operators)


def remote_error(failed: Failed) -> OperatorError:
    """The OperatorError a worker's :class:`Failed` stands for (its cause rebuilt from type name and text)."""
    cause = RemoteOperatorError(f"{failed.error_type}: {failed.message}")
    error = OperatorError(failed.operator, cause, failed.details, summary=f"{failed.error_type}: {failed.message}")
    error.__cause__ = cause
    return error
