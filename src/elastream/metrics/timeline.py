"""A run's timeline: per period, throughput, utilisation, levels, write-blocked ratios and the decisions applied.

This is how a user *sees* elasticity happen (issue 20, item 7): each entry is
one period of the run — what left the sources, how busy the workers were,
the parallelism the flow ran at (:class:`~elastream.runtime.decisions.Levels`),
each operator's back-pressure and every decision applied in that period with
its reason and outcome. :meth:`Timeline.plot` draws throughput on top and the
levels below as step lines with the decisions marked, the shape of C-Stream
Fig. 9b and the IBM elastic scheduler's Fig. 10.

Threading: :meth:`Timeline.record` is called from the period listener's thread
(the runtime's statistics ticker) while readers (``entries``, ``to_json``,
``plot``) run on any other thread; a lock guards the list, and entries are
frozen, so a reader works on a consistent copy.

Example::

    timeline = Timeline()
    timeline.record(period, levels, decisions=applied)   # once a period
    timeline.save_json("out.json"); timeline.plot("out.png")
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastream.metrics.period import PeriodStats
from elastream.runtime import decisions as decisions_module
from elastream.runtime.decisions import Applied, Levels

SOURCE_KIND = "source"


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One period of a run, as the timeline shows it."""

    at_s: float
    """Run time (s) at the period's end."""
    period_s: float
    throughput: float
    """Tuples per second leaving the sources over the period."""
    levels: Levels
    utilisation: float
    """Mean busy fraction of the worker threads over the period."""
    write_blocked: dict[str, float] = field(default_factory=dict)
    """Per operator, the fraction of the period it spent back-pressured (writing into a full port)."""
    decisions: tuple[Applied, ...] = ()
    """Decisions applied in this period, with their reasons and outcomes."""
    pause_ms: float | None = None
    """Longest time any stream waited because of a reconfiguration in this period (None: none happened)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"at_s": self.at_s, "period_s": self.period_s, "throughput": self.throughput,
                "utilisation": self.utilisation, "levels": self.levels.to_json(),
                "write_blocked": dict(self.write_blocked),
                "decisions": [applied_to_json(a) for a in self.decisions], "pause_ms": self.pause_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TimelineEntry:
        """The entry :meth:`to_json` wrote (decision types unknown to this version are dropped)."""
        applied = (applied_from_json(d) for d in data.get("decisions", ()))
        return cls(at_s=data["at_s"], period_s=data["period_s"], throughput=data["throughput"],
                   levels=levels_from_json(data["levels"]), utilisation=data["utilisation"],
                   write_blocked=dict(data.get("write_blocked", {})),
                   decisions=tuple(a for a in applied if a is not None), pause_ms=data.get("pause_ms"))


def entry_from_period(period: PeriodStats, levels: Levels, decisions: Iterable[Applied] = (),
                      pause_ms: float | None = None) -> TimelineEntry:
    """The timeline entry of ``period`` at ``levels``.

    Example: a 2 s period in which the sources emitted 1,000 tuples gives ``throughput == 500.0``.
    """
    span = period.period_s
    emitted = sum(op.tuples_out for op in period.operators.values() if op.kind == SOURCE_KIND)
    # A retired thread stays listed (its process's numbering holds still), idle: leave it out of the mean.
    workers = [w for w in period.workers if w.alive_s is None or w.alive_s > 0]
    return TimelineEntry(
        at_s=period.start_s + span, period_s=span, throughput=emitted / span if span > 0 else 0.0,
        levels=levels, utilisation=sum(w.utilisation for w in workers) / len(workers) if workers else 0.0,
        write_blocked={name: _fraction(op.write_blocked_s, span) for name, op in period.operators.items()},
        decisions=tuple(decisions), pause_ms=pause_ms)


def _fraction(seconds: float, span: float) -> float:
    # An operator several workers run at once can be blocked for more than the period's wall time.
    return min(1.0, seconds / span) if span > 0 else 0.0


class Timeline:
    """The ordered entries of one run; appended once a period, readable at any time from any thread."""

    def __init__(self, entries: Iterable[TimelineEntry] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: list[TimelineEntry] = list(entries)

    def record(self, period: PeriodStats, levels: Levels, decisions: Iterable[Applied] = (),
               pause_ms: float | None = None) -> TimelineEntry:
        """Append the entry of ``period`` (see :func:`entry_from_period`) and return it."""
        entry = entry_from_period(period, levels, decisions, pause_ms)
        self.append(entry)
        return entry

    def append(self, entry: TimelineEntry) -> None:
        """Append an entry built elsewhere."""
        with self._lock:
            self._entries.append(entry)

    @property
    def entries(self) -> tuple[TimelineEntry, ...]:
        """A consistent copy of the entries so far, in order."""
        with self._lock:
            return tuple(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def decisions(self) -> list[Applied]:
        """Every decision applied over the run, in order."""
        return [a for e in self.entries for a in e.decisions]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"entries": [...]}``, each entry as :meth:`TimelineEntry.to_json`."""
        return {"entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timeline:
        """The timeline :meth:`to_json` wrote."""
        return cls(TimelineEntry.from_json(e) for e in data.get("entries", ()))

    def save_json(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path`` (replaced atomically); returns the path."""
        from elastream.metrics.status import write_json_atomic

        return write_json_atomic(path, self.to_json())

    def plot(self, path: str | Path, title: str = "") -> Path:
        """A PNG: throughput over time on top, the levels below as step lines, decisions marked; returns the path.

        Needs matplotlib (the ``plot`` extra), imported here so the runtime never pays for it.
        """
        return plot_timeline(self.entries, Path(path), title)


def applied_to_json(applied: Applied) -> dict[str, Any]:
    """An applied decision as JSON: its type name, its fields, its reason, when, and whether it took effect."""
    decision = applied.decision
    fields = {f.name: _plain(getattr(decision, f.name)) for f in dataclasses.fields(decision) if f.name != "reason"}
    return {"type": type(decision).__name__, "fields": fields, "reason": getattr(decision, "reason", ""),
            "at_s": applied.at_s, "ok": applied.ok, "why": applied.why, "pause_ms": applied.pause_ms}


def applied_from_json(data: dict[str, Any]) -> Applied | None:
    """The :class:`Applied` that :func:`applied_to_json` wrote; None for a decision type this version lacks."""
    kind = getattr(decisions_module, data.get("type", ""), None)
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        return None
    names = {f.name for f in dataclasses.fields(kind)}
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in data.get("fields", {}).items() if k in names}
    decision = kind(**args, reason=data.get("reason", "")) if "reason" in names else kind(**args)
    return Applied(decision=decision, at_s=data["at_s"], ok=data["ok"], why=data.get("why", ""),
                   pause_ms=data.get("pause_ms"))


def levels_from_json(data: dict[str, Any]) -> Levels:
    """The :class:`Levels` that ``Levels.to_json`` wrote."""
    return Levels(threads=tuple(data.get("threads", (1,))), replicas=dict(data.get("replicas", {})),
                  fused=tuple(tuple(chain) for chain in data.get("fused", ())),
                  held=data.get("held_processes", 0) > 0, moved=dict(data.get("moved", {})))


def _plain(value: Any) -> Any:
    """Tuples (and nested ones) as lists, so the JSON reads the same after a round trip."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


# -- the PNG (C-Stream Fig. 9b, IBM Fig. 10) ------------------------------------------------


def plot_timeline(entries: Sequence[TimelineEntry], path: Path, title: str = "") -> Path:
    """Draw ``entries`` into the PNG ``path`` (see :meth:`Timeline.plot`); returns ``path``."""
    # The object API with the Agg canvas, not pyplot: no global backend switch, callable from any thread.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plotting a timeline needs matplotlib: pip install 'elastream[plot]'") from exc

    figure = Figure(figsize=(10, 6.5), layout="constrained")
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    _throughput_panel(top, entries)
    _levels_panel(bottom, entries)
    for ax in (top, bottom):
        _mark_decisions(ax, entries)
    bottom.set_xlabel("run time (s)")
    figure.suptitle(title or "elastic run: throughput and levels per period")
    if not entries:
        top.text(0.5, 0.5, "no periods recorded", ha="center", va="center", transform=top.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _throughput_panel(ax: Any, entries: Sequence[TimelineEntry]) -> None:
    ax.plot([e.at_s for e in entries], [e.throughput for e in entries], marker=".", label="throughput")
    ax.set_ylabel("tuples/s from the sources")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def level_series(entries: Sequence[TimelineEntry]) -> dict[str, list[int | None]]:
    """The step lines of the levels panel, by label: threads per process, processes, replicas per operator
    and, once a unit moved whole into another process, how many did.

    Per-process thread lines appear once there is more than one process (None while a process did
    not exist); a replica line for every operator that had replicas in some period (1 where it had none).

    Example: ``level_series([entry])["processes"] == [1]`` for a one-process run.
    """
    series: dict[str, list[int | None]] = {}
    processes = max((e.levels.processes for e in entries), default=1)
    for p in range(processes):
        label = "threads" if processes == 1 else f"threads, process {p}"
        series[label] = [e.levels.threads[p] if p < e.levels.processes else None for e in entries]
    series["processes"] = [e.levels.working_processes for e in entries]
    replicated = dict.fromkeys(name for e in entries for name in e.levels.replicas)
    for name in replicated:
        series[f"replicas {name}"] = [e.levels.replicas.get(name, 1) for e in entries]
    if any(e.levels.moved for e in entries):  # a moved unit keeps one replica: its line alone would not show it
        series["units moved whole"] = [len(e.levels.moved) for e in entries]
    return series


def _levels_panel(ax: Any, entries: Sequence[TimelineEntry]) -> None:
    if not entries:
        return
    # An entry's levels hold from its period's end (where decisions apply) to the next one's: post-steps,
    # with the last level drawn over one more period so it shows (C-Stream Fig. 9b).
    times = [e.at_s for e in entries] + [entries[-1].at_s + entries[-1].period_s]
    series = level_series(entries)
    for i, (label, values) in enumerate(series.items()):
        # Equal levels would hide each other: each line is nudged a little so every one stays visible.
        nudge = (i - (len(series) - 1) / 2) * 0.04
        points = [math.nan if v is None else v + nudge for v in values]
        ax.step(times, points + points[-1:], where="post", label=label)
    top = max((v for values in series.values() for v in values if v is not None), default=1)
    ax.set_ylabel("level")
    ax.set_ylim(0, top + 0.5)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _mark_decisions(ax: Any, entries: Sequence[TimelineEntry]) -> None:
    """A vertical line at each applied decision: grey when it took effect, red when its check failed."""
    for applied in (a for e in entries for a in e.decisions):
        ax.axvline(applied.at_s, color="tab:grey" if applied.ok else "tab:red", linestyle=":", linewidth=1)
