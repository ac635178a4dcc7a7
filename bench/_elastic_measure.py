"""Measurements of ``elastream bench elastic``: load-phase windows, steady throughput, convergence, output check.

Everything here reads what one run left behind — the sink's
:class:`~elastream.bench._elastic_flows.PhaseRecord` and, for an elastic run,
its timeline entries — and returns plain numbers; nothing here runs a flow.

Definitions (the report prints them too):

* a load phase's *window* at the sink runs from the arrival of its first tuple
  to the arrival of the next phase's first tuple (the last phase: to its last tuple),
  cut where the source stopped: what arrives after that is a backlog draining with
  the source's share of the CPU free, which no steady state would see (a run that
  buffers much, e.g. over rings, otherwise scores its last phase too high);
* *converged* (elastic runs): the first period of the phase from which the levels sit
  at the phase's steady level — the most common level of the phase's second half — and
  change at most once per full 10 periods from there to the phase's end; the periods to
  converge count from the phase's first period;
* *steady-state throughput*: the phase's tuples arriving at the sink after the phase's
  start plus a skip (the convergence time for an elastic run, at least ``min_skip_s``),
  per second of that part of the window.

Example::

    windows = phase_windows(record)
    steady_rate(record, windows[1], skip_s=1.0)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from elastream.bench._elastic_flows import PhaseRecord


@dataclass(frozen=True, slots=True)
class PhaseWindow:
    """One load phase as the sink saw it (``perf_counter`` instants)."""

    phase: int
    begin: float
    end: float
    tuples: int

    @property
    def span_s(self) -> float:
        return self.end - self.begin


def phase_arrivals(record: PhaseRecord) -> dict[int, list[tuple[float, int]]]:
    """Per phase, (arrival instant, tuples of that phase) for every batch holding some of them."""
    out: dict[int, list[tuple[float, int]]] = {}
    offset = 0
    phases = record.phases
    for t, n in record.batches:
        for phase, count in Counter(phases[offset:offset + n]).items():
            out.setdefault(phase, []).append((t, count))
        offset += n
    return out


def phase_windows(record: PhaseRecord) -> list[PhaseWindow]:
    """The load phases' windows at the sink, in phase order, cut at the source's end.

    Phases that delivered nothing before the source stopped are left out.
    """
    arrivals = phase_arrivals(record)
    order = sorted(arrivals)
    windows = []
    for i, phase in enumerate(order):
        batches = arrivals[phase]
        begin = batches[0][0]
        end = arrivals[order[i + 1]][0][0] if i + 1 < len(order) else batches[-1][0]
        end = min(end, record.source_end)
        if end > begin:
            windows.append(PhaseWindow(phase, begin, end, sum(n for t, n in batches if t <= end)))
    return windows


def drain_s(record: PhaseRecord) -> float:
    """Seconds the sink still received tuples after the source stopped (the backlog left at the end)."""
    return max(0.0, record.batches[-1][0] - record.source_end) if record.batches else 0.0


def steady_rate(record: PhaseRecord, window: PhaseWindow, skip_s: float,
                arrivals: dict[int, list[tuple[float, int]]] | None = None) -> tuple[float, float]:
    """(tuples/s, seconds measured) of ``window``'s phase after ``skip_s`` into it.

    When the skip leaves less than a fifth of the window, the window's second half is measured instead.
    """
    arrivals = arrivals if arrivals is not None else phase_arrivals(record)
    start = window.begin + skip_s
    if window.end - start < 0.2 * window.span_s:
        start = window.begin + 0.5 * window.span_s
    span = window.end - start
    tuples = sum(n for t, n in arrivals.get(window.phase, ()) if start < t <= window.end)
    return (tuples / span if span > 0 else 0.0), span


def check_output(record: PhaseRecord, emitted: int | None, ordered: bool) -> str | None:
    """None when the sink got exactly tuples 0..emitted-1 (in order when ``ordered``); else what is wrong."""
    seqs = record.seqs
    if emitted is not None and len(seqs) != emitted:
        return f"the sink got {len(seqs):,} tuples, the source emitted {emitted:,}"
    n = len(seqs)
    if ordered:
        wrong = next((i for i, s in enumerate(seqs) if s != i), None)
        return None if wrong is None else f"out of order: position {wrong:,} holds tuple {seqs[wrong]:,}"
    if len(set(seqs)) != n or (n and (min(seqs) != 0 or max(seqs) != n - 1)):
        return f"tuples lost or duplicated: {n:,} received, {len(set(seqs)):,} distinct"
    return None


# -- elastic runs: the timeline per phase -------------------------------------------------------


def level_key(levels: Any) -> str:
    """A comparable text for one period's levels (threads per process, replicas, fused chains)."""
    return json.dumps(levels.to_json(), sort_keys=True)


def entries_by_phase(entries: Sequence[Any], windows: Sequence[PhaseWindow], run_start: float) -> list[list[Any]]:
    """The timeline entries whose period's midpoint falls in each window (``run_start``: the run's t=0)."""
    out: list[list[Any]] = [[] for _ in windows]
    for entry in entries:
        mid = run_start + entry.at_s - entry.period_s / 2
        for i, w in enumerate(windows):
            last = i + 1 == len(windows)
            if w.begin <= mid < w.end or (last and w.begin <= mid <= w.end + entry.period_s):
                out[i].append(entry)
                break
    return out


def changes(keys: Sequence[str]) -> int:
    """How many times consecutive levels differ."""
    return sum(1 for a, b in zip(keys, keys[1:]) if a != b)


def convergence(entries: Sequence[Any]) -> dict[str, Any]:
    """Periods to converge, steady level changes per 10 periods, steady levels and longest pause of one phase."""
    keys = [level_key(e.levels) for e in entries]
    pauses = [e.pause_ms for e in entries if e.pause_ms is not None]
    result: dict[str, Any] = {"periods": len(keys), "converge_periods": None, "steady_changes_per_10": None,
                              "steady_levels": None, "max_pause_ms": max(pauses) if pauses else None,
                              "level_changes": changes(keys), "not_applied": not_applied(entries)}
    if not keys:
        return result
    steady = Counter(keys[len(keys) // 2:]).most_common(1)[0][0]
    for i, key in enumerate(keys):
        tail = keys[i:]
        if key == steady and changes(tail) <= len(tail) // 10:
            result.update(converge_periods=i, steady_changes_per_10=10 * changes(tail) / max(len(tail), 10),
                          steady_levels=json.loads(steady))
            break
    return result


def not_applied(entries: Sequence[Any]) -> dict[str, int]:
    """Decisions the run did not apply (proposals no backend applies yet, failed checks), counted by type."""
    counts = Counter(type(a.decision).__name__ for e in entries for a in e.decisions if not a.ok)
    return dict(sorted(counts.items()))


# -- summaries over repeats ------------------------------------------------------------------------


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the values that are not None (None when none is)."""
    present = [v for v in values if v is not None]
    return median(present) if present else None


def max_or_none(values: Sequence[float | None]) -> float | None:
    """The largest of the values that are not None (None when none is)."""
    present = [v for v in values if v is not None]
    return max(present) if present else None
