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
* a load phase's *source window* runs from the source's first emission of the phase to its
  first emission of the next phase (the last phase: to its last emission);
* *steady-state throughput*: the tuples the source emitted in the phase's *steady span* —
  its source window after a skip (the convergence time for an elastic run, at least
  ``min_skip_s``) and, for every phase but the last, before a tail of the same ``min_skip_s``
  ahead of the next phase — per second, counted twice: as the source emitted them (over the
  steady span) and as the sink received them (from the first of them to arrive to the last,
  up to the source's end), and the lower of the two. The same tuples at both ends: in a
  steady state the two rates agree; a backlog that fills inside the flow during the span
  stretches the sink's span, one that drains shortens it. A drain can be large: a merge or
  port ahead of a sink that falls behind (a sink sharing its process's one thread with busy
  replicas) holds seconds of finished tuples and releases them during a later, cheaper phase,
  so the sink sees a phase's tuples faster than the flow could ever process them.
  The tail is the next change of load reaching back: a flow holding work in hand (a replica's
  window, a piece cut to the old cost) finishes the old phase's last tuples behind the new,
  dearer ones, so they reach the sink late and the phase's window at the sink ends in a
  trickle (IBM Fig. 10 with replicated branches: its last 0.8 s at a third of the rate). That
  time is the change's, like the fill after it. Counting the steady span's own tuples at the
  sink leaves the whole trickle out, however long the flow's latency: an earlier definition
  counted the sink's arrivals between its window's start plus the skip and its end (the next
  phase's first arrival) less the tail, which kept the part of a trickle longer than the tail
  (plain ``Runner()`` on IBM Fig. 10, 0.55 s of tuples in flight: its sink window ran 2 s past
  the source's change, its sink rate read 111.6k against 117.9k at the source and 117–121k
  per second at the sink from the phase's seventh second on). Its figure stays in the report as
  ``sink_window_tuples_per_s``.

Example::

    windows = phase_windows(record)
    steady_rates(record, windows[1], skip_s=1.0).tuples_per_s
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

import numpy as np

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


@dataclass(frozen=True, slots=True)
class SteadyRate:
    """A phase's steady-state throughput at both ends of the flow, and the lower of the two that counts."""

    tuples_per_s: float
    seconds: float
    """The span that gave ``tuples_per_s``."""
    sink_tuples_per_s: float
    source_tuples_per_s: float | None
    """None when the record holds no emission instants (or the source window has no length)."""
    sink_window_tuples_per_s: float
    """The earlier definition's sink rate: arrivals in the sink window after the skip, before the tail."""


def phase_emissions(record: PhaseRecord) -> dict[int, list[tuple[float, int]]]:
    """Per phase, (emission instant, tuples) in emission order; empty when the record holds no emission instants."""
    if len(record.emitted) != len(record.phases):
        return {}
    out: dict[int, list[tuple[float, int]]] = {}
    # The source stamps a whole batch with one instant, so there are few distinct (instant, phase) pairs.
    for (t, phase), n in sorted(Counter(zip(record.emitted, record.phases)).items()):
        out.setdefault(phase, []).append((t, n))
    return out


def source_windows(emissions: dict[int, list[tuple[float, int]]]) -> dict[int, PhaseWindow]:
    """Per phase, the source window: its first emission to the next phase's first (the last phase: its last)."""
    order = sorted(emissions)
    out = {}
    for i, phase in enumerate(order):
        batches = emissions[phase]
        end = emissions[order[i + 1]][0][0] if i + 1 < len(order) else batches[-1][0]
        out[phase] = PhaseWindow(phase, batches[0][0], end, sum(n for _, n in batches))
    return out


def measured_span(begin: float, end: float, skip_s: float, tail_s: float = 0.0) -> tuple[float, float]:
    """The part of [begin, end] measured: after ``skip_s`` and before the last ``tail_s``; its second half
    when that leaves under a fifth."""
    start, stop = begin + skip_s, end - tail_s
    if stop - start < 0.2 * (end - begin):
        return begin + 0.5 * (end - begin), end
    return start, stop


def tuple_arrivals(record: PhaseRecord) -> np.ndarray:
    """Per tuple (parallel to ``record.seqs``), the arrival instant of its batch."""
    times = np.fromiter((t for t, _ in record.batches), np.float64, len(record.batches))
    counts = np.fromiter((n for _, n in record.batches), np.int64, len(record.batches))
    return np.repeat(times, counts)


def sink_rate_of_emitted(record: PhaseRecord, phase: int, start: float, end: float,
                         arrived: np.ndarray) -> tuple[float, float] | None:
    """(tuples/s, seconds) at the sink of ``phase``'s tuples the source emitted in [start, end): from the first
    of them to arrive to the last that arrived by the source's end; None when they span no time there."""
    phases = np.frombuffer(record.phases, np.int8)
    emitted = np.frombuffer(record.emitted, np.float64)
    mask = (phases == phase) & (emitted >= start) & (emitted < end) & (arrived <= record.source_end)
    times = arrived[mask]
    if times.size == 0:
        return None
    first, last = float(times.min()), float(times.max())
    if last <= first:
        return None
    # A batch arriving at t was finished before t: count (first, last].
    return int(np.count_nonzero(times > first)) / (last - first), last - first


def steady_rates(record: PhaseRecord, window: PhaseWindow, skip_s: float,
                 arrivals: dict[int, list[tuple[float, int]]] | None = None,
                 emissions: dict[int, list[tuple[float, int]]] | None = None, tail_s: float = 0.0,
                 arrived: np.ndarray | None = None) -> SteadyRate:
    """``window``'s phase after ``skip_s`` and before its last ``tail_s``: tuples/s at the source, of the same
    tuples at the sink, and the lower of the two (see the module's definitions)."""
    arrivals = arrivals if arrivals is not None else phase_arrivals(record)
    emissions = emissions if emissions is not None else phase_emissions(record)
    start, end = measured_span(window.begin, window.end, skip_s, tail_s)
    # A batch arriving at t was finished before t: count (start, end].
    window_n = sum(n for t, n in arrivals.get(window.phase, ()) if start < t <= end)
    window_rate = window_n / (end - start) if end > start else 0.0
    sink_rate, sink_span = window_rate, end - start
    source = source_windows(emissions).get(window.phase)
    if source is None or source.span_s <= 0:
        return SteadyRate(sink_rate, sink_span, sink_rate, None, window_rate)
    start, end = measured_span(source.begin, source.end, skip_s, tail_s)
    # A batch emitted at t is taken in by the flow after t: count [start, end).
    source_rate = sum(n for t, n in emissions[window.phase] if start <= t < end) / (end - start)
    at_sink = sink_rate_of_emitted(record, window.phase, start, end,
                                   arrived if arrived is not None else tuple_arrivals(record))
    if at_sink is not None:
        sink_rate, sink_span = at_sink
    if source_rate < sink_rate:
        return SteadyRate(source_rate, end - start, sink_rate, source_rate, window_rate)
    return SteadyRate(sink_rate, sink_span, sink_rate, source_rate, window_rate)


def steady_rate(record: PhaseRecord, window: PhaseWindow, skip_s: float,
                arrivals: dict[int, list[tuple[float, int]]] | None = None) -> tuple[float, float]:
    """(tuples/s, seconds measured) of ``window``'s phase after ``skip_s`` into it (see :func:`steady_rates`)."""
    rate = steady_rates(record, window, skip_s, arrivals)
    return rate.tuples_per_s, rate.seconds


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
