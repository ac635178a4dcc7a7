"""The fluent layer: ``flow.source(...).map(f).filter(p).key_by(k).reduce(g).sink(...)``.

Each call adds an operator to the underlying flow and connects it; the result
is the same graph one would build with ``flow.add`` / ``flow.connect``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from elastream.operators.base import Operator

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow, OperatorHandle, OutputRef


def as_source(obj: Any) -> Operator:
    """An operator from a source operator, an iterable or a generator function.

    A str or bytes is refused: iterating it would stream its characters one by one,
    which is never what ``flow.source("data.txt")`` means; so is a path.
    """
    from elastream.ops.sources import FromGenerator, FromIterable

    if isinstance(obj, (str, bytes, bytearray, os.PathLike)):
        raise TypeError(_text_source_message(obj))
    if isinstance(obj, Operator):
        if obj.n_inputs != 0:
            raise ValueError(f"{type(obj).__name__} has input ports; a source has none")
        return obj
    if callable(obj) and not hasattr(obj, "__iter__"):
        return FromGenerator(obj)
    if hasattr(obj, "__iter__"):
        return FromIterable(obj)
    raise TypeError(f"cannot make a source from {type(obj).__name__}")


def _text_source_message(text: str | bytes | bytearray | os.PathLike) -> str:
    if isinstance(text, os.PathLike):
        text = os.fspath(text)
        why = "a path is not a stream of records"
    else:
        what = "characters" if isinstance(text, str) else "byte values"
        why = f"a {type(text).__name__} is not a stream of records (iterating it would emit its {what} one by one)"
    shown = repr(text) if len(text) <= 60 else repr(text[:57]) + "..."
    return (f"flow.source({shown}): {why}. To read a file line by line: flow.source(es.ops.TextLines({shown})) "
            f"(es.ops.FromCSV, FromJSONL or FromParquet for other formats); for one record holding it: "
            f"flow.source(es.ops.FromIterable([{shown}]))")


class Stream:
    """One output port of a flow, extended by chaining operators onto it."""

    def __init__(self, flow: Flow, port: OutputRef):
        self.flow = flow
        self.port = port

    @property
    def handle(self) -> OperatorHandle:
        """The operator producing this stream."""
        return self.port.handle

    def then(self, op: Operator, name: str | None = None) -> Stream:
        """Connect this stream to input 0 of ``op`` and continue from its output 0."""
        handle = self.flow.add(op, name=name)
        self.flow.connect(self.port, handle.in_(0))
        return Stream(self.flow, handle.out(0))

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> Stream:
        """Stateless one-to-one transform."""
        from elastream.ops.transforms import Map

        return self.then(Map(fn), name)

    def filter(self, pred: Callable[[Any], bool], name: str | None = None) -> Stream:
        """Keep tuples where ``pred`` holds."""
        from elastream.ops.transforms import Filter

        return self.then(Filter(pred), name)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> Stream:
        """Stateless one-to-many transform."""
        from elastream.ops.transforms import FlatMap

        return self.then(FlatMap(fn), name)

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Merge this stream with ``others`` (per-stream order kept)."""
        from elastream.ops.transforms import Union

        handle = self.flow.add(Union(1 + len(others)), name=name)
        for i, s in enumerate((self, *others)):
            self.flow.connect(s.port, handle.in_(i))
        return Stream(self.flow, handle.out(0))

    def key_by(self, key: Callable[[Any], Any], partitions: int = 1, strategy: str = "hash") -> KeyedStream:
        """Partition this stream by ``key`` for keyed (partitioned stateful) operators.

        ``partitions`` bounds how many workers the next operator may have at
        once; ``strategy`` maps keys to partitions ("hash" or "range").
        """
        return KeyedStream(self, key, partitions, strategy)

    def process(self, step: Callable[[Any, Any], Any], state: Callable[[], Any] = dict,
                kind: str = "stateful", name: str | None = None,
                on_end: Callable[[Any], Iterable[Any]] | None = None) -> Stream:
        """Whole-stream stateful step: ``step(state, item) -> (state, outputs)``.

        ``on_end(state) -> outputs`` runs once when the input ends (flush what is still open).

        Example: ``s.process(lambda n, x: (n + 1, ()), state=int, on_end=lambda n: [n])`` emits the count.
        """
        from elastream.ops.keyed import StatefulProcess

        if kind != "stateful":
            raise ValueError("Stream.process is kind='stateful'; use key_by(k).process(...) for partitioned")
        return self.then(StatefulProcess(step, state, on_end=on_end), name)

    def sink(self, op: Operator, name: str | None = None) -> OperatorHandle:
        """End the pipeline in sink ``op``; returns its handle."""
        handle = self.flow.add(op, name=name)
        self.flow.connect(self.port, handle.in_(0))
        return handle

    def collect(self, name: str | None = None) -> OperatorHandle:
        """End the pipeline in a Collect sink."""
        from elastream.ops.sinks import Collect

        return self.sink(Collect(), name)


class KeyedStream:
    """A stream partitioned by a key function."""

    def __init__(self, stream: Stream, key: Callable[[Any], Any], partitions: int = 1, strategy: str = "hash"):
        self.stream = stream
        self.key = key
        self.partitions = partitions
        self.strategy = strategy

    def process(self, step: Callable[[Any, Any], Any], state: Callable[[], Any] = dict,
                name: str | None = None, on_end: Callable[[Any, Any], Iterable[Any]] | None = None) -> Stream:
        """Partitioned stateful step with one state per key.

        ``on_end(key, state) -> outputs`` runs for every key (first-seen order)
        when the input ends: close the sessions or windows still open.

        Example: ``s.key_by(user).process(step, state=list, on_end=lambda user, clicks: [(user, len(clicks))])``
        """
        from elastream.ops.keyed import KeyedProcess

        op = KeyedProcess(self.key, step, state, self.partitions, self.strategy, on_end=on_end)
        return self.stream.then(op, name)

    def reduce(self, fn: Callable[[Any, Any], Any], initial: Callable[[], Any] | None = None,
               name: str | None = None) -> Stream:
        """Emit ``(key, running fold)`` for every tuple."""
        from elastream.ops.keyed import KeyedReduce

        return self.stream.then(KeyedReduce(self.key, fn, initial, self.partitions, self.strategy), name)

    def window(self, windows: Any, time: Callable[[Any], float], late: str = "drop", close: str = "key",
               lateness: float = 0.0) -> WindowedStream:
        """Group each key's tuples into event-time windows (``es.ops.Tumbling`` / ``Sliding`` / ``Session``).

        A window is emitted when a later tuple of its key passes its end plus ``lateness``
        (``close="key"``), or when the stream's latest time minus ``lateness`` does
        (``close="watermark"``), and at the end.

        Example: ``s.key_by(user).window(es.ops.Tumbling(60.0), time=lambda c: c.ts).count()``
        emits ``WindowResult(user, start, end, clicks)`` per user and minute (see
        :mod:`elastream.ops.windows` for when a window is emitted and what is late).
        """
        from elastream.ops.windows import CLOSE_RULES

        if close not in CLOSE_RULES:
            raise ValueError(f"window: close must be one of {CLOSE_RULES}, got {close!r}")
        return WindowedStream(self, windows, time, late, close, lateness)


class WindowedStream:
    """A keyed stream grouped into event-time windows; an aggregate makes it a stream of ``WindowResult``."""

    def __init__(self, keyed: KeyedStream, windows: Any, time: Callable[[Any], float], late: str,
                 close: str = "key", lateness: float = 0.0):
        self.keyed, self.windows, self.time, self.late = keyed, windows, time, late
        self.close, self.lateness = close, lateness

    def aggregate(self, fn: Callable[[Any, Any], Any], initial: Callable[[], Any] | None = None,
                  name: str | None = None) -> Stream:
        """Fold each window with ``fn(acc, item)`` from ``initial()`` (without it: from the window's first tuple).

        With ``close="watermark"`` the fold is named ``name`` and the closer behind it ``name + "-close"``.
        """
        from elastream.ops.windows import WatermarkCloser, WindowAggregate

        k = self.keyed
        if self.close == "key":
            op = WindowAggregate(k.key, self.windows, self.time, fn, initial, k.partitions, k.strategy, self.late,
                                 lateness=self.lateness)
            return k.stream.then(op, name)
        closer = WatermarkCloser(self.lateness, self.late)  # built first: a bad lateness fails before the flow grows
        op = WindowAggregate(k.key, self.windows, self.time, fn, initial, k.partitions, k.strategy, self.late,
                             emit="updates", lateness=self.lateness)
        return k.stream.then(op, name).then(closer, None if name is None else f"{name}-close")

    def count(self, name: str | None = None) -> Stream:
        """Tuples per window and key."""
        from elastream.ops.windows import count_step

        return self.aggregate(count_step, int, name)
