"""A live terminal view of a running flow: per operator, queue fill, busy vs back-pressured time, workers, replicas.

:class:`LiveView` samples ``handle.stats()`` on its own daemon thread a few
times a second and renders a rich table: each operator's input queue fill,
the share of the last sample it was busy and back-pressured (write-blocked,
kept apart as STYLE.md asks), its worker threads and replicas, and its input
and output rates; the title has the flow's throughput, and an elastic run's latest
decisions show below the table. It is a display only: timing benchmarks run
without it, since every sample takes the GIL from the workers.

When the console is not a terminal it draws nothing and prints at most one
plain progress line every ``progress_every_s`` seconds (``None``: nothing).
With ``status_path`` it also writes :func:`~elastream.metrics.status.status_json`
to that file at each sample, replaced atomically, for a monitoring system to poll.

Threading: construct, enter and exit on one thread (the caller's); the
sampler thread is the only one that samples and renders, and it is joined on
exit, whether the body ended normally or by an exception.

Example::

    handle = es.Runner().start(flow)
    with LiveView(handle):
        result = handle.wait()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from elastream.metrics.period import OperatorPeriod, PeriodStats, period_between
from elastream.metrics.stats import FlowStats
from elastream.metrics.status import queue_fill, replica_counts, status_json, write_json_atomic
from elastream.metrics.timeline import Timeline, applied_to_json
from elastream.runtime.decisions import Applied, Levels

THREAD_NAME = "elastream-live-view"
JOIN_TIMEOUT_S = 5.0
"""How long exit waits for the sampler (one ``stats()`` call at most); it is a daemon thread either way."""
RECENT_DECISIONS = 3

LevelsSource = Levels | Callable[[], Levels | None] | None


@dataclass(frozen=True, slots=True)
class Sample:
    """What one frame shows: the snapshot, the change since the previous one, the levels and recent decisions."""

    stats: FlowStats
    period: PeriodStats
    levels: Levels | None
    decisions: tuple[Applied, ...] = ()


class LiveView:
    """Show a running flow in the terminal until the ``with`` block ends (see the module docstring)."""

    def __init__(self, handle: Any, refresh_s: float = 0.25, *, console: Console | None = None,
                 status_path: str | Path | None = None, title: str = "", total: int | None = None,
                 levels: LevelsSource = None, transient: bool = False,
                 progress_every_s: float | None = 5.0) -> None:
        """``handle``: a RunHandle. ``total``: the tuples the sources will emit, when known (shows progress).

        ``levels``: the flow's levels, or a function returning them; by default the latest entry of the
        handle's elastic timeline (``handle.elastic_timeline``), when it has one.
        """
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be positive, got {refresh_s}")
        self.handle = handle
        self.refresh_s = refresh_s
        self.console = console or Console()
        self.status_path = None if status_path is None else Path(status_path)
        self.title = title
        self.total = total
        self.transient = transient
        self.progress_every_s = progress_every_s
        self.frames = 0
        """Samples taken so far (each rendered, printed as a line or only written to the status file)."""
        self.error: BaseException | None = None
        """What stopped the sampler early (a failing ``stats()`` or status write), if anything."""
        self._levels = levels
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._previous: FlowStats | None = None
        self._last_line = float("-inf")

    # -- lifecycle (caller's thread) --------------------------------------------------------
    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start sampling (and, on a terminal, the live display)."""
        if self._thread is not None:
            raise RuntimeError("LiveView already started")
        if self.console.is_terminal:
            self._live = Live(Text("starting…"), console=self.console, auto_refresh=False,
                              transient=self.transient)
            self._live.start()
        self._thread = threading.Thread(target=self._sample_until_stopped, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, join the sampler and close the display; safe to call twice."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.error is not None:
            self.console.print(f"live view stopped: {type(self.error).__name__}: {self.error}", markup=False,
                               highlight=False)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the sampler has ended by itself (after the frame of a finished run); True once it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    @property
    def running(self) -> bool:
        """True while the sampler thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # -- the sampler thread ------------------------------------------------------------------
    def _sample_until_stopped(self) -> None:
        try:
            finished = self.handle.finished
            while True:
                ended = finished.is_set()
                self._show(self._take_sample())
                if ended:
                    return  # that frame has the final counts
                if self._stop.wait(self.refresh_s):
                    if finished.is_set():
                        self._show(self._take_sample())  # stopped just after the run ended: show how it ended
                    return
        except Exception as exc:  # noqa: BLE001 — a display must never take the run down; reported on stop
            self.error = exc

    def _take_sample(self) -> Sample:
        stats = self.handle.stats()
        period = period_between(self._previous, stats)
        self._previous = stats
        timeline = _timeline_of(self.handle)
        levels = self._current_levels(timeline)
        recent = tuple(timeline.decisions()[-RECENT_DECISIONS:]) if timeline is not None else ()
        return Sample(stats=stats, period=period, levels=levels, decisions=recent)

    def _current_levels(self, timeline: Timeline | None) -> Levels | None:
        if isinstance(self._levels, Levels):
            return self._levels
        if callable(self._levels):
            return self._levels()
        entries = timeline.entries if timeline is not None else ()
        return entries[-1].levels if entries else None

    def _show(self, sample: Sample) -> None:
        if self.status_path is not None:
            write_json_atomic(self.status_path, status_json(sample.stats, sample.levels))
        if self._live is not None:
            self._live.update(render(sample, self.title, self.total), refresh=True)
        else:
            self._print_progress_line(sample)
        self.frames += 1

    def _print_progress_line(self, sample: Sample) -> None:
        now = time.monotonic()
        if self.progress_every_s is None or now - self._last_line < self.progress_every_s:
            return
        self._last_line = now
        self.console.print(progress_line(sample, self.title, self.total), markup=False, highlight=False)


def _timeline_of(handle: Any) -> Timeline | None:
    # Only an elastic run's handle has a Timeline; the backends' ``timeline`` is a plain list of decisions.
    timeline = getattr(handle, "elastic_timeline", None)
    return timeline if isinstance(timeline, Timeline) else None


# -- rendering (pure functions of a sample) ----------------------------------------------------


def source_rate(period: PeriodStats) -> float:
    """Tuples per second the sources emitted over ``period``."""
    emitted = sum(op.tuples_out for op in period.operators.values() if op.kind == "source")
    return emitted / period.period_s if period.period_s > 0 else 0.0


def _share(seconds: float, span: float, most: float) -> str:
    """Worker-seconds per second of the sample, at most ``most``.

    An operator several workers run at once can pass 100 %. Busy time is credited when an
    activation ends, so a long one lands whole in one short sample: the share is capped at the
    threads that could have run it.
    """
    return f"{min(seconds / span, most):.0%}" if span > 0 else "-"


def _queue_cell(size: int, capacity: int) -> Text:
    if not capacity:
        return Text("-")
    fill = size / capacity
    style = "red" if fill >= 0.9 else "yellow" if fill >= 0.5 else ""
    return Text(f"{size:,}/{capacity:,} ({fill:.0%})", style=style)


def _headline(sample: Sample, title: str, total: int | None) -> str:
    stats = sample.stats
    threads = sample.levels.threads if sample.levels is not None else (stats.threads,)
    if len(threads) == 1:
        where = f"{threads[0]} thread{'s' if threads[0] != 1 else ''}"
    else:
        where = f"{len(threads)} processes, threads {list(threads)}"
    parts = [title or "running", f"{stats.elapsed_s:.1f} s", where,
             f"{source_rate(sample.period):,.0f} tuples/s from the sources"]
    if total:
        read = sum(op.tuples_out for op in stats.operators.values() if op.kind == "source")
        parts.append(f"{read:,}/{total:,} read ({min(1.0, read / total):.0%})")
    return " · ".join(parts)


COLUMNS = ("operator", "queue (fill)", "busy", "back-pressured", "workers", "replicas", "in /s", "out /s")


def operator_row(op: OperatorPeriod, stats: FlowStats, replicas: dict[str, int], span: float) -> list[Text]:
    """One table row (:data:`COLUMNS`): name, queue fill, busy, back-pressured, workers, replicas, rates."""
    live = stats.operators[op.name]
    size, capacity = queue_fill(live)
    origin = op.name.rsplit("#", 1)[0]     # a replica, split or merge row shows its operator's replicas
    count = replicas.get(origin)
    most = max(1, len(stats.workers), stats.threads)
    plain = [op.name, _share(op.busy_s, span, most), _share(op.write_blocked_s, span, most), str(live.workers),
             str(count) if count else "", _rate(op.tuples_in, span), _rate(op.tuples_out, span)]
    cells = [Text(text) for text in plain]
    cells.insert(1, _queue_cell(size, capacity))
    return cells


def _rate(tuples: int, span: float) -> str:
    return f"{tuples / span:,.0f}" if span > 0 else "-"


def render(sample: Sample, title: str = "", total: int | None = None) -> Group:
    """The frame of ``sample``: the operator table and, for an elastic run, its latest decisions."""
    replicas = replica_counts(sample.stats, sample.levels)
    span = sample.period.period_s
    rows = [operator_row(op, sample.stats, replicas, span) for op in sample.period.operators.values()]
    table = Table(title=_headline(sample, title, total), title_justify="left")
    # Widths from the cells' lengths and no wrapping: rich then skips measuring and wrapping every cell,
    # which is most of a frame's CPU time, time the sampler takes from the workers under the GIL.
    for i, name in enumerate(COLUMNS):
        width = max([len(name), *(len(row[i]) for row in rows)])
        table.add_column(name, justify="left" if i == 0 else "right", width=width, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    lines = [Text(describe(a), style="green" if a.ok else "red") for a in sample.decisions]
    return Group(table, *lines)


def describe(applied: Applied) -> str:
    """One line for an applied decision: ``"12.0 s SetReplicas operator=sum count=2: reason"``."""
    data = applied_to_json(applied)
    fields = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in data["fields"].items()
                      if v is not None)  # an option left out (SetReplicas.replicas: the run's choice)
    outcome = "" if applied.ok else f" (failed: {applied.why})"
    return f"{applied.at_s:.1f} s {data['type']} {fields}: {data['reason']}{outcome}"


def progress_line(sample: Sample, title: str = "", total: int | None = None) -> str:
    """The plain line printed instead of the table when the output is not a terminal."""
    queued = sum(queue_fill(op)[0] for op in sample.stats.operators.values())
    return f"{_headline(sample, title, total)} · {queued:,} queued"
