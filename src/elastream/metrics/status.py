"""A running flow's status as JSON: the snapshot a monitoring system polls (issue 20, item 7).

:func:`status_json` turns one :class:`~elastream.metrics.stats.FlowStats` (and
the flow's :class:`~elastream.runtime.decisions.Levels`, when known) into a
JSON-ready dict: per operator its queue fill, tuples in and out, busy and
back-pressured (write-blocked) seconds kept apart, its worker threads and
replicas; totals over the flow; and the elapsed time.
:func:`write_json_atomic` writes such a dict so that a poller never reads a
half-written file (the ``--status`` file of the live view).

Threading: pure functions of frozen snapshots; safe from any thread.

Example::

    status = status_json(handle.stats())
    status["operators"]["parse"]["queue"]["fill"]      # 0.0 .. 1.0
    write_json_atomic("status.json", status)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.ordered.replicate import parse_replica_name
from elastream.runtime.decisions import Levels

STATUS_VERSION = 1
"""Bumped when a field changes meaning, so a poller can tell."""


def status_json(stats: FlowStats, levels: Levels | None = None) -> dict[str, Any]:
    """The JSON snapshot of a flow: ``version``, ``elapsed_s``, ``operators``, ``totals``, ``workers``, ``levels``.

    Each operator's ``replicas`` is the number of replicas of the operator it belongs to (``levels``
    when given, else counted from the ``name#i`` replica parts in ``stats``); a replica part also
    names its operator in ``replica_of``.

    Example: ``status_json(result.stats)["totals"]["tuples_from_sources"]``
    """
    replicas = replica_counts(stats, levels)
    operators = {name: _operator_json(op, replicas) for name, op in stats.operators.items()}
    return {
        "version": STATUS_VERSION,
        "elapsed_s": stats.elapsed_s,
        "policy": stats.policy,
        "operators": operators,
        "totals": _totals(stats),
        "workers": {"threads": stats.threads, "alive": sum(1 for w in stats.workers if w.alive),
                    "mean_utilisation": stats.mean_utilisation()},
        "replicas": replicas,
        "levels": None if levels is None else levels.to_json(),
    }


def replica_counts(stats: FlowStats, levels: Levels | None = None) -> dict[str, int]:
    """Replicas per replicated operator: ``levels.replicas`` when known, else the ``name#i`` parts in ``stats``.

    Example: a run with ``replicas={"sum": 2}`` gives ``{"sum": 2}``.
    """
    if levels is not None and levels.replicas:
        return dict(levels.replicas)
    parts = (parse_replica_name(name) for name in stats.operators)
    return dict(Counter(origin for origin, _ in (p for p in parts if p is not None)))


def queue_fill(op: OperatorStats) -> tuple[int, int]:
    """``(tuples queued, capacity)`` over the operator's input ports; ``(0, 0)`` for a source."""
    return sum(p.size for p in op.inputs), sum(p.capacity for p in op.inputs)


def _operator_json(op: OperatorStats, replicas: dict[str, int]) -> dict[str, Any]:
    size, capacity = queue_fill(op)
    part = parse_replica_name(op.name)
    origin = part[0] if part is not None else op.name
    entry = {
        "kind": op.kind, "state": op.state,
        "queue": {"size": size, "capacity": capacity, "fill": size / capacity if capacity else 0.0},
        "tuples_in": op.tuples_in, "tuples_out": op.tuples_out,
        "busy_s": op.busy_s, "write_blocked_s": op.write_blocked_s, "read_blocked_s": op.read_blocked_s,
        "write_blocked_ratio": op.output_write_blocked_ratio,
        "workers": op.workers, "peak_workers": op.peak_workers,
        "replicas": replicas.get(origin, 1),
    }
    if part is not None:
        entry["replica_of"] = origin
    return entry


def _totals(stats: FlowStats) -> dict[str, Any]:
    ops = stats.operators.values()
    from_sources = sum(op.tuples_out for op in ops if op.kind == "source")
    return {
        "tuples_from_sources": from_sources,
        "tuples_into_sinks": sum(op.tuples_in for op in ops if op.kind == "sink"),
        "throughput": from_sources / stats.elapsed_s if stats.elapsed_s > 0 else 0.0,
        "queued": sum(queue_fill(op)[0] for op in ops),
        "busy_s": sum(op.busy_s for op in ops),
        "write_blocked_s": sum(op.write_blocked_s for op in ops),
        "operators": len(stats.operators),
    }


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` by replacing it at once: a reader sees the old file or the new one.

    Example: ``write_json_atomic("status.json", {"elapsed_s": 1.0})``
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the target's folder: os.replace is atomic only within one file system.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
