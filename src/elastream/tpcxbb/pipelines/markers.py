"""Latency markers (ordered-multicore §7) for the TPCx-BB pipelines.

With ``marker_every=N`` the source is wrapped in a :class:`MarkingSource`,
which inserts a :class:`Marker` after every N rows, stamped with
``time.perf_counter()``; every stage's functions are wrapped (the
``*_passing_markers`` functions below, applied by
:class:`~elastream.tpcxbb.pipelines.stages.Stages`) so that a marker passes
through unchanged and the query functions never see one; the
:class:`MarkerCollect` sink stamps its arrival. ``perf_counter`` is
``CLOCK_MONOTONIC`` on Linux, one clock for every process of the machine, so
stamps compare across worker processes. Markers never change an answer: the
answer is built :func:`without_markers`.

Threading: the source and the sink each run in one worker at a time; the
wrappers are pure functions, run by whichever worker runs their stage.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import elastream as es
from elastream.ops.sinks import Collect

__all__ = ["Marker", "MarkerCollect", "MarkingSource", "flat_map_passing_markers", "key_passing_markers",
           "keyed_end_skipping_markers", "markers_of", "step_passing_markers", "without_markers"]


@dataclass(frozen=True, slots=True)
class Marker:
    """A latency probe: the ``seq``-th marker, made at ``stamp`` (perf_counter), seen by the sink at ``arrived``."""

    seq: int
    stamp: float
    arrived: float | None = None

    @property
    def latency_s(self) -> float:
        """Seconds from the source to the sink (the sink must have stamped the marker)."""
        if self.arrived is None:
            raise ValueError(f"marker {self.seq} never reached the sink")
        return self.arrived - self.stamp


class MarkingSource(es.SourceOperator):
    """Wraps a source and inserts a :class:`Marker` before its first tuple and after every ``every`` tuples.

    Marker 0 stamps the start of the stream. Runs wherever the source runs,
    one worker at a time (a source's ``max_workers`` is 1).
    """

    def __init__(self, inner: es.SourceOperator, every: int):
        if every < 1:
            raise ValueError(f"MarkingSource: every must be >= 1, got {every}")
        super().__init__(outputs=1)
        self.inner = inner
        self.every = every
        self._count = 0
        self._seq = 0

    def open(self, ctx: Any) -> None:
        self._count, self._seq = self.every, 0  # "every rows seen already": marker 0 precedes the first row
        self.inner.open(ctx)

    def next_batch(self, max_items: int) -> list | None:
        # Marker 0 marks when the stream started, so it is stamped before the first read;
        # the others when their rows leave the source (the paper's processing latency).
        started = perf_counter() if self._seq == 0 else 0.0
        items = self.inner.next_batch(max_items)
        if not items:
            return items
        every, count = self.every, self._count
        if count + len(items) < every:
            self._count = count + len(items)
            return items
        stamp = perf_counter()
        out: list = []
        start = 0
        while count + len(items) - start >= every:
            cut = start + every - count
            out.extend(items[start:cut])
            out.append(Marker(self._seq, stamp if self._seq else started))
            self._seq += 1
            start, count = cut, 0
        out.extend(items[start:])
        self._count = len(items) - start
        return out

    def instantiate(self) -> MarkingSource:
        """A run's copy, wrapping the run's own instance of the inner source (which holds the open file)."""
        twin = copy.copy(self)
        twin.inner = self.inner.instantiate()
        return twin

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"MarkingSource({self.inner.describe()}, every={self.every})"


class MarkerCollect(Collect):
    """A Collect sink that stamps each arriving :class:`Marker` with its arrival time."""

    def on_batch(self, items: list, port: int) -> None:
        now = perf_counter()
        append = self.items.append
        for x in items:
            append(Marker(x.seq, x.stamp, now) if x.__class__ is Marker else x)


def markers_of(outputs: Iterable[Any]) -> list[Marker]:
    """The markers a sink collected, in arrival order."""
    return [x for x in outputs if x.__class__ is Marker]


def without_markers(outputs: Iterable[Any]) -> list[Any]:
    """The tuples a sink collected, markers left out."""
    return [x for x in outputs if x.__class__ is not Marker]


def flat_map_passing_markers(fn: Callable[[Any], Iterable[Any]]) -> Callable[[Any], Iterable[Any]]:
    """An SL function that lets markers through untouched and gives ``fn`` everything else."""
    def flat_map(x: Any) -> Iterable[Any]:
        return (x,) if x.__class__ is Marker else fn(x)
    flat_map.__name__ = getattr(fn, "__name__", "flat_map")
    return flat_map


def key_passing_markers(key: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A key function that gives every marker one key of its own and ``key(x)`` to the rest."""
    # Markers share one key of their own (the Marker class: a pickled class keeps its identity).
    def marker_key(x: Any) -> Any:
        return Marker if x.__class__ is Marker else key(x)
    return marker_key


def step_passing_markers(step: Callable[[Any, Any], tuple[Any, Iterable[Any]]]) -> Callable[..., Any]:
    """A keyed or stateful step that forwards markers, state untouched, and folds the rest."""
    def marker_step(state: Any, x: Any) -> tuple[Any, Iterable[Any]]:
        return (state, (x,)) if x.__class__ is Marker else step(state, x)
    return marker_step


def keyed_end_skipping_markers(on_end: Callable[[Any, Any], Iterable[Any]] | None) -> Callable[..., Any] | None:
    """An ``on_end`` that skips the markers' own key (None stays None)."""
    if on_end is None:
        return None

    def marker_end(key: Any, state: Any) -> Iterable[Any]:
        return () if key is Marker else on_end(key, state)
    return marker_end
