"""Windowed aggregates per key: tumbling, sliding and session windows over event time.

A :class:`WindowAggregate` folds each key's tuples into the windows their
event time (``time(item)``) falls in and emits one :class:`WindowResult`
``(key, start, end, value)`` per window and key. It is a
:class:`~elastream.ops.keyed.KeyedProcess` (partitioned kind), so everything
that runs keyed operators runs it: worker threads through the hybrid queue,
replicas in worker processes with partition moves, and the Spark streaming
translation.

When a window is emitted
------------------------
A key's window is emitted as soon as a later tuple *of the same key* has an
event time at or past the window's end (plus ``lateness``, which lets tuples
arrive that much out of order) (a session: ``gap`` or more after its latest
tuple, i.e. at or past the session's end; a tuple exactly ``gap`` later starts
the next session), and every window still open is emitted when the stream ends
(keys in first-seen order, windows by start). Closing on the key's own tuples,
rather than on a watermark shared by all keys, makes every output a function
of that key's subsequence alone, so any partitioning over threads or
processes produces exactly the sequential output (ordered-multicore
Definition 5.1) without a watermark having to reach every replica in order.

Closing on the stream's event time instead (``close="watermark"``)
-----------------------------------------------------------------
A key that goes quiet keeps its window open until the stream ends under the
rule above. With ``close="watermark"`` a window is emitted as soon as the
*stream's* watermark — the largest event time seen so far, minus
``lateness`` — passes its end, whatever the key. The aggregate then runs as two
operators: the partitioned :class:`WindowAggregate` (``emit="updates"``) folds
in parallel and sends a :class:`WindowUpdate` per tuple and window, and one
ordered :class:`WatermarkCloser` (stateful kind) keeps the latest value per
window and emits it when the watermark passes — in window-end order, ties in
the order the windows were first updated. The closer sees the updates in the
sequential order, so the output still equals a sequential run's.

Late tuples
-----------
A tuple whose window was already emitted for its key (a later tuple of the key
had passed that window's end; for sessions: a tuple before the open session;
with ``close="watermark"``: a window the watermark had passed) is *late*:
``late="drop"`` (the default) leaves it out of that window and counts it in
the key's state (:func:`late_count`; the closer's for the watermark), ``late="fail"``
stops the flow with the operator's name, the key and the times.

Example (clicks per user and minute)::

    (flow.source(clicks)
         .key_by(lambda c: c.user, partitions=8)
         .window(es.ops.Tumbling(60.0), time=lambda c: c.ts)
         .count()
         .sink(es.ops.Collect(), name="per_minute"))
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from elastream.operators.user_code import note_fold_hint
from elastream.ops.keyed import KeyedProcess, StatefulProcess

LATE_POLICIES = ("drop", "fail")
CLOSE_RULES = ("key", "watermark")
EMIT_MODES = ("final", "updates")
#: Most windows a tuple may fall in (a sliding window's size / slide): each is an accumulator per key.
MAX_WINDOWS_PER_TUPLE = 10_000


class WindowResult(NamedTuple):
    """One window of one key: ``[start, end)`` in event time and the folded ``value``."""

    key: Any
    start: float
    end: float
    value: Any


class WindowUpdate(NamedTuple):
    """A window's value after one more tuple (``emit="updates"``), with that tuple's event ``time``."""

    key: Any
    start: float
    end: float
    value: Any
    time: float


def _result(key: Any, start: float, end: float, value: Any) -> WindowResult:
    # tuple.__new__ skips the generated __new__ (a Python function): a third of the cost per window
    return _tuple_new(WindowResult, (key, start, end, value))


def _update(key: Any, start: float, end: float, value: Any, time: float) -> WindowUpdate:
    return _tuple_new(WindowUpdate, (key, start, end, value, time))


_tuple_new = tuple.__new__


@dataclass(frozen=True)
class Tumbling:
    """Fixed windows of ``size`` seconds, aligned to multiples of ``size``: ``Tumbling(60.0)``."""

    size: float

    def __post_init__(self) -> None:
        _check_positive("Tumbling", size=self.size)

    def starts(self, t: float) -> list[float]:
        """Start of the one window holding time ``t``."""
        return [math.floor(t / self.size) * self.size]


@dataclass(frozen=True)
class Sliding:
    """Windows of ``size`` seconds starting every ``slide`` seconds: ``Sliding(60.0, 10.0)``.

    A tuple falls in ``size / slide`` windows (rounded up); ``slide == size`` is tumbling.
    """

    size: float
    slide: float

    def __post_init__(self) -> None:
        _check_positive("Sliding", size=self.size, slide=self.slide)
        if self.slide > self.size:
            raise ValueError(f"Sliding: slide ({self.slide}) larger than size ({self.size}) would skip time")
        if self.size / self.slide > MAX_WINDOWS_PER_TUPLE:
            raise ValueError(f"Sliding: every tuple would fall in {self.size / self.slide:.0f} windows "
                             f"(size / slide); at most {MAX_WINDOWS_PER_TUPLE} are allowed")

    def starts(self, t: float) -> list[float]:
        """Starts of the windows holding time ``t``, earliest first."""
        n = math.floor(t / self.slide)
        starts = []
        while n * self.slide > t - self.size:  # multiples of slide, so no rounding error builds up
            starts.append(n * self.slide)
            n -= 1
        return starts[::-1]


@dataclass(frozen=True)
class Session:
    """Per-key sessions: a session ends when the key's next tuple comes ``gap`` seconds or more after
    its last one; it spans ``[first time, last time + gap)``: ``Session(1800.0)``."""

    gap: float

    def __post_init__(self) -> None:
        _check_positive("Session", gap=self.gap)


Windows = Tumbling | Sliding | Session


class WindowState:
    """One key's open windows (``open``: start -> accumulator), its latest time and its late tuples."""

    __slots__ = ("open", "latest", "late", "first_end", "session_end")

    def __init__(self) -> None:
        self.open: dict[float, Any] = {}
        self.latest: float | None = None
        self.late = 0
        self.first_end = math.inf  # the earliest end of an open window: nothing closes before it
        self.session_end: float | None = None  # sessions: the open session's end (last time + gap)

    def __getstate__(self) -> tuple:
        return self.open, self.latest, self.late, self.first_end, self.session_end

    def __setstate__(self, state: tuple) -> None:
        self.open, self.latest, self.late, self.first_end, self.session_end = state


def count_step(n: int, _item: Any) -> int:
    """The fold of a count: ``n + 1`` per tuple."""
    return n + 1


def late_count(state: WindowState) -> int:
    """Late tuples a key's state has dropped (``late="drop"``)."""
    return state.late


_NO_ACC = object()


class _WindowFold:
    """The step and end functions of a :class:`WindowAggregate` (picklable, unlike closures)."""

    def __init__(self, key: Callable[[Any], Any], time: Callable[[Any], float], windows: Windows,
                 fn: Callable[[Any, Any], Any], initial: Callable[[], Any] | None, late: str, updates: bool = False,
                 lateness: float = 0.0):
        self.key, self.time, self.windows, self.fn, self.initial, self.late = key, time, windows, fn, initial, late
        self.updates, self.lateness = updates, lateness

    def fixed_step(self, state: WindowState, item: Any) -> tuple[WindowState, Any]:
        """Tumbling / sliding: fold ``item`` into its windows; return the windows of its key that its time
        closes (with ``updates``: the windows it went into, as :class:`WindowUpdate`)."""
        t = self.time(item)
        size, lateness = self.windows.size, self.lateness  # type: ignore[union-attr]
        closed = self._close_due(state, item, t - lateness, size) if t - lateness >= state.first_end else ()
        updated: list | None = [] if self.updates else None
        latest, windows = state.latest, state.open
        for start in self.windows.starts(t):  # type: ignore[union-attr]
            end = start + size
            if latest is not None and end <= latest - lateness:  # closed by the key's latest tuple
                self._late(state, item, t, start, end)
                continue
            acc = windows.get(start, _NO_ACC)
            if acc is _NO_ACC and end < state.first_end:  # a new window that ends first
                state.first_end = end
            acc = windows[start] = self._fold(acc, item)
            if updated is not None:
                updated.append(_update(self.key(item), start, end, acc, t))
        if latest is None or t > latest:
            state.latest = t
        return state, closed if updated is None else updated

    def end(self, key: Any, state: WindowState) -> list[WindowResult]:
        """Every window still open for ``key``, by start (the stream has ended)."""
        if isinstance(self.windows, Session):
            return [_result(key, s, state.session_end, acc) for s, acc in state.open.items()]
        size = self.windows.size
        return [_result(key, s, s + size, state.open[s]) for s in sorted(state.open)]

    def _close_due(self, state: WindowState, item: Any, mark: float, size: float) -> list[WindowResult]:
        windows = state.open
        k = self.key(item)
        if len(windows) == 1:  # the common case (tumbling): the one window, due since first_end <= mark
            (start, acc), = windows.items()
            windows.clear()
            state.first_end = math.inf
            return [_result(k, start, start + size, acc)]
        closed = [_result(k, s, s + size, windows.pop(s)) for s in sorted(s for s in windows if s + size <= mark)]
        state.first_end = min(windows) + size if windows else math.inf
        return closed

    def session_step(self, state: WindowState, item: Any) -> tuple[WindowState, list]:
        """Sessions: fold ``item`` into its key's session; return the session its time closes (or its update)."""
        t = self.time(item)
        gap = self.windows.gap  # type: ignore[union-attr]
        closed: list[WindowResult] = []
        if state.open:
            (start, acc), = state.open.items()
            if t < start:  # before the open session: its own session was emitted, or would have been
                self._late(state, item, t, start, state.session_end)
                return state, closed
            if t < state.session_end:
                acc = state.open[start] = self._fold(acc, item)
                state.session_end = max(state.session_end, t + gap)
                state.latest = max(state.latest, t)
                return state, [_update(self.key(item), start, state.session_end, acc, t)] if self.updates else closed
            closed.append(_result(self.key(item), start, state.session_end, state.open.pop(start)))
        acc = state.open[t] = self._fold(_NO_ACC, item)
        state.session_end = t + gap
        state.latest = t
        return state, [_update(self.key(item), t, t + gap, acc, t)] if self.updates else closed

    def _fold(self, acc: Any, item: Any) -> Any:
        try:  # free unless it raises: then say where a fold without initial starts
            if acc is _NO_ACC:
                return item if self.initial is None else self.fn(self.initial(), item)
            return self.fn(acc, item)
        except TypeError as exc:
            if self.initial is None:
                note_fold_hint(exc, "the window aggregate", "each window's fold starts from its first tuple")
            raise

    def _late(self, state: WindowState, item: Any, t: float, start: float, end: float | None) -> None:
        if self.late == "fail":
            raise ValueError(f"late tuple for key {self.key(item)!r}: time {t} falls in window [{start}, {end}), "
                             f"already emitted (the key's latest time is {state.latest})")
        state.late += 1


class WindowAggregate(KeyedProcess):
    """Fold each key's tuples per event-time window; emit a :class:`WindowResult` per window and key.

    ``windows`` is :class:`Tumbling`, :class:`Sliding` or :class:`Session`;
    ``time(item)`` is the tuple's event time in seconds; ``fn(acc, item)``
    folds, starting from ``initial()`` or, without ``initial``, from the
    window's first tuple (as :class:`~elastream.ops.keyed.KeyedReduce`). See
    the module docstring for when windows are emitted and what is late.

    With ``emit="updates"`` it emits a :class:`WindowUpdate` per tuple and
    window instead, for a :class:`WatermarkCloser` downstream (the windows'
    state is still freed by the key's own tuples; nothing is emitted at the end).

    Example: ``WindowAggregate(user_of, Tumbling(60.0), ts_of, lambda n, _: n + 1, initial=int)``
    counts each user's tuples per minute.
    """

    def __init__(self, key: Callable[[Any], Any], windows: Windows, time: Callable[[Any], float],
                 fn: Callable[[Any, Any], Any], initial: Callable[[], Any] | None = None, partitions: int = 1,
                 strategy: str = "hash", late: str = "drop", emit: str = "final", lateness: float = 0.0):
        if not isinstance(windows, (Tumbling, Sliding, Session)):
            raise TypeError(f"WindowAggregate: windows must be Tumbling, Sliding or Session, "
                            f"not {type(windows).__name__}")
        for name, f in (("key", key), ("time", time), ("fn", fn)):
            if not callable(f):
                raise TypeError(f"WindowAggregate: {name} must be callable, got {type(f).__name__}")
        if initial is not None and not callable(initial):
            raise TypeError(f"WindowAggregate: initial must be a zero-argument factory, got {type(initial).__name__}")
        if late not in LATE_POLICIES:
            raise ValueError(f"WindowAggregate: late must be one of {LATE_POLICIES}, got {late!r}")
        if emit not in EMIT_MODES:
            raise ValueError(f"WindowAggregate: emit must be one of {EMIT_MODES}, got {emit!r}")
        _check_lateness("WindowAggregate", lateness)
        if lateness and isinstance(windows, Session):
            raise ValueError("WindowAggregate: sessions take no lateness (a session ends at its key's first "
                             "tuple after the gap)")
        self.windows = windows
        self.late = late
        fold = _WindowFold(key, time, windows, fn, initial, late, updates=emit == "updates", lateness=float(lateness))
        step = fold.session_step if isinstance(windows, Session) else fold.fixed_step
        super().__init__(key, step, WindowState, partitions, strategy, on_end=None if emit == "updates" else fold.end)

    def describe(self) -> str:
        return f"WindowAggregate({self.windows})"


class CloserState:
    """The open windows of a :class:`WatermarkCloser`: latest value and end per ``(key, start)``, a heap by
    end, the watermark, and the late updates dropped."""

    __slots__ = ("open", "heap", "watermark", "late", "n")

    def __init__(self) -> None:
        self.open: dict[tuple[Any, float], list] = {}   # (key, start) -> [end, value, heap order]
        self.heap: list[tuple[float, int, Any, float]] = []
        self.watermark: float | None = None
        self.late = 0
        self.n = 0

    def __getstate__(self) -> tuple:
        return self.open, self.heap, self.watermark, self.late, self.n

    def __setstate__(self, state: tuple) -> None:
        self.open, self.heap, self.watermark, self.late, self.n = state


class _Closer:
    """Step and end of a :class:`WatermarkCloser` (picklable)."""

    def __init__(self, lateness: float, late: str):
        self.lateness, self.late = lateness, late

    def step(self, state: CloserState, update: WindowUpdate) -> tuple[CloserState, list[WindowResult]]:
        """Keep ``update``'s value; emit every window the watermark has now passed."""
        key, start, end, value, t = update
        w = state.watermark
        slot = state.open.get((key, start))
        if slot is None and w is not None and end <= w:
            if self.late == "fail":
                raise ValueError(f"late tuple for key {key!r}: time {t} falls in window [{start}, {end}), "
                                 f"already emitted (the watermark is {w})")
            state.late += 1
        elif slot is None:
            state.open[(key, start)] = [end, value, state.n]
            heapq.heappush(state.heap, (end, state.n, key, start))
            state.n += 1
        else:
            if end != slot[0]:  # a session grew: its heap entry moves later (the old one goes stale)
                heapq.heappush(state.heap, (end, slot[2], key, start))
            slot[0], slot[1] = end, value
        mark = t - self.lateness
        if w is None or mark > w:
            state.watermark = mark
            heap = state.heap
            if heap and heap[0][0] <= mark:
                return state, self._due(state, mark)
        return state, ()

    def end(self, state: CloserState) -> list[WindowResult]:
        """Every window still open (the stream has ended), by end."""
        return self._due(state, math.inf)

    @staticmethod
    def _due(state: CloserState, mark: float) -> list[WindowResult]:
        heap, out = state.heap, []
        while heap and heap[0][0] <= mark:
            end, _, key, start = heapq.heappop(heap)
            slot = state.open.get((key, start))
            if slot is not None and slot[0] == end:  # else a stale entry of a session that grew
                del state.open[(key, start)]
                out.append(_result(key, start, end, slot[1]))
        return out


class WatermarkCloser(StatefulProcess):
    """Emit the windows of :class:`WindowUpdate` s once the watermark (latest time - ``lateness``) passes them.

    One ordered instance (stateful kind) behind a ``WindowAggregate(..., emit="updates")``; windows by
    end, ties in the order they were first updated; updates of a window already emitted are late.
    """

    def __init__(self, lateness: float = 0.0, late: str = "drop"):
        _check_lateness("WatermarkCloser", lateness)
        if late not in LATE_POLICIES:
            raise ValueError(f"WatermarkCloser: late must be one of {LATE_POLICIES}, got {late!r}")
        closer = _Closer(float(lateness), late)
        super().__init__(closer.step, CloserState, on_end=closer.end)
        self.lateness = lateness

    def describe(self) -> str:
        return f"WatermarkCloser(lateness={self.lateness})"


def _check_lateness(owner: str, lateness: float) -> None:
    if not (isinstance(lateness, (int, float)) and math.isfinite(lateness) and lateness >= 0):
        raise ValueError(f"{owner}: lateness must be a number of seconds >= 0, got {lateness!r}")


def _check_positive(owner: str, **values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{owner}: {name} must be a positive number of seconds, got {v!r}")
