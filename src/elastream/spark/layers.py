"""What runs in Spark's Python workers: the ``mapInArrow`` source layer and the keyed layers' state functions.

A row on its way carries an order key ``k`` (:mod:`elastream.spark.order_keys`),
its pickled item ``v``, a route ``r`` (the index of the operator it goes to)
and a group ``g`` (the pickled key of that operator). :class:`SourceLayer` turns
Parquet batches into dicts with source order keys and runs them through the
stateless operators up to the first keyed steps or sinks; a :class:`KeyedLayer`
steps the groups of its own keyed steps in order-key order (flushing a key's
``on_end`` once, when the end of stream's event-time timeout fires) and passes
every other row through. Fan-out copies a row per consumer; nothing runs twice.

Threading: instances are built on the driver and pickled to the workers;
Spark calls them there, one batch or one group at a time per worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.spark.failures import fail_in_worker
from elastream.spark.order_keys import END_KEY, child_key, dumps, end_key, is_control, loads, marker_key, port_key, \
    source_key
from elastream.spark.plan import CONTROL_ROUTE, STATEFUL_GROUP, KeyedStep, Route

# -- the row format -------------------------------------------------------------------------------------------------

#: Columns the driver adds to the source rows: control (a step number, -1 for the end, null for data),
#: sequence number (file number << ROW_BITS | row in file), and the synthetic event time.
CTL_COLUMN, SEQ_COLUMN, ET_COLUMN = "_elastream_ctl", "_elastream_seq", "_elastream_et"
#: The schema of the rows between layers.
ROWS_SCHEMA = "k binary, v binary, r long, g binary"
#: Synthetic event times (seconds): data rows, the keys' timeout, the end row (elastream.spark.streaming).
DATA_TIME_S, TIMEOUT_S, END_TIME_S = 946_684_800, 2_524_608_000, 4_102_444_800
TIMEOUT_MS = TIMEOUT_S * 1000


# -- rows ----------------------------------------------------------------------------------------------------------

class _Control:
    """Stands for the item of a control row (markers and end of stream carry none)."""


_CONTROL = _Control()
#: A row on its way: (order key, item or _CONTROL, route, group).
Row = tuple[bytes, Any, int, bytes]


def _deliver(routes: Sequence[Route], k: bytes, item: Any, target: int, port: int, out: list[Row]) -> None:
    """Run ``item`` through stateless operators from ``target`` on, until it reaches a keyed step or a sink."""
    route = routes[target]
    what = route.what
    if what == "keyed":
        assert route.key is not None
        out.append((k, item, target, route.key.group(item)))
        return
    if what == "sink":
        out.append((k, item, target, b""))
        return
    if what == "union":
        results = [(port_key(k, port), item)]
    else:
        results = _apply(route, k, item)
    for k2, item2 in results:
        for consumer, consumer_port in route.consumers:
            _deliver(routes, k2, item2, consumer, consumer_port, out)


def _apply(route: Route, k: bytes, item: Any) -> list[tuple[bytes, Any]]:
    """A Map, Filter or FlatMap on one item: its outputs with their order keys."""
    fn = route.fn
    assert fn is not None
    try:
        if route.what == "map":
            return [(k, fn(item))]
        if route.what == "filter":
            return [(k, item)] if fn(item) else []
        return [(child_key(k, j), y) for j, y in enumerate(fn(item))]
    except Exception as exc:  # noqa: BLE001 - any user error, reported with the operator's name
        raise fail_in_worker(route.name, exc) from exc


def _control_rows(k: bytes, stateful: Sequence[int]) -> list[Row]:
    """A control row for the sinks, and a copy for each stateful step (it must see the end row)."""
    return [(k, _CONTROL, CONTROL_ROUTE, b""), *((k, _CONTROL, s, STATEFUL_GROUP) for s in stateful)]


def _columns(rows: list[Row]) -> tuple[list[bytes], list[bytes], list[int], list[bytes]]:
    """Rows as the k, v, r, g columns (items pickled)."""
    ks, vs, rs, gs = [], [], [], []
    for k, item, r, g in rows:
        ks.append(k)
        vs.append(b"" if item is _CONTROL else dumps(item))
        rs.append(r)
        gs.append(g)
    return ks, vs, rs, gs


@dataclass(frozen=True, slots=True)
class SourceLayer:
    """The ``mapInArrow`` right after the source: rows become dicts (as the local FromParquet makes them),
    get source order keys, and run through the stateless operators up to the first keyed steps or sinks."""

    routes: tuple[Route, ...]
    source: int
    columns: tuple[str, ...]
    stateful: tuple[int, ...]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from elastream.ops.arrow_rows import rows_of

        consumers = self.routes[self.source].consumers
        for batch in batches:
            out: list[Row] = []
            rows = rows_of(batch.select(list(self.columns)))
            seqs = batch.column(SEQ_COLUMN).to_pylist()
            for row, seq, ctl in zip(rows, seqs, batch.column(CTL_COLUMN).to_pylist()):
                if ctl is not None:
                    out.extend(_control_rows(END_KEY if ctl < 0 else marker_key(ctl),
                                             self.stateful))
                    continue
                k = source_key(seq)
                for consumer, port in consumers:
                    _deliver(self.routes, k, row, consumer, port, out)
            if out:
                ks, vs, rs, gs = _columns(out)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(ks, pa.binary()), pa.array(vs, pa.binary()), pa.array(rs, pa.int64()),
                     pa.array(gs, pa.binary())], names=["k", "v", "r", "g"])


@dataclass(slots=True)
class KeyState:
    """What a keyed step keeps per key: where the key was first seen, the key itself, the user's state."""

    first: bytes
    key: Any
    state: Any


class _NoValue:
    """A KeyedReduce key without ``initial`` before its first item (its first item becomes the fold)."""

    def __reduce__(self) -> str:
        return "_NO_VALUE"  # unpickles as the one instance, so ``is _NO_VALUE`` holds in any worker


_NO_VALUE = _NoValue()


@dataclass(frozen=True, slots=True)
class KeyedLayer:
    """The ``applyInPandasWithState`` function of one layer of keyed steps (module docstring).

    A group is (route, key): groups of this layer's steps are stepped in
    order-key order and their outputs run on through the stateless operators
    that follow; every other group (rows for later layers, control rows)
    passes through unchanged.
    """

    routes: tuple[Route, ...]
    steps: dict[int, KeyedStep]

    def __call__(self, group: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        route = int(group[0])
        step = self.steps.get(route)
        if step is None:
            for frame in frames:
                yield frame[["k", "v", "r", "g"]]
            return
        outputs = _KeyedCall(step, state).run(frames)
        rows: list[Row] = []
        for k, item in outputs:
            for consumer, port in self.routes[route].consumers:
                _deliver(self.routes, k, item, consumer, port, rows)
        if rows:
            import pandas as pd

            ks, vs, rs, gs = _columns(rows)
            yield pd.DataFrame({"k": ks, "v": vs, "r": rs, "g": gs})


@dataclass(slots=True)
class _KeyedCall:
    """One call of a keyed step for one key: step the key's rows in order, flush it at the end of stream."""

    step: KeyedStep
    state: Any

    def run(self, frames: Iterator[Any]) -> list[tuple[bytes, Any]]:
        state = self.state
        if state.hasTimedOut:  # only after the end row: every key still open flushes once
            kept: KeyState = loads(bytes(state.get[0]))
            state.remove()
            return self._flush(kept)
        rows = sorted((bytes(k), v) for f in frames for k, v in zip(f["k"], f["v"]))
        kept = loads(bytes(state.get[0])) if state.exists else None
        out: list[tuple[bytes, Any]] = []
        for k, v in rows:
            if not is_control(k):  # a stateful step's copy of a control row only makes it exist
                kept = self._step(kept, k, loads(v), out)
        if kept is None:  # a stateful step exists from the start, as locally
            kept = KeyState(b"", None, self._initial())
        if state.getCurrentWatermarkMs() > TIMEOUT_MS:
            out.extend(self._flush(kept))  # the end has passed: this is the flushing batch
            state.remove()
        else:
            state.update((dumps(kept),))
            state.setTimeoutTimestamp(TIMEOUT_MS)
        return out

    def _initial(self) -> Any:
        factory = self.step.factory
        if factory is None:
            return _NO_VALUE
        try:
            return factory()
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(self.step.name, exc) from exc

    def _step(self, kept: KeyState | None, k: bytes, item: Any, out: list) -> KeyState:
        s = self.step
        try:
            if kept is None:  # the key's first item: on_end gets this key object, as locally
                kept = KeyState(k, s.key(item) if s.key is not None else None, self._initial())
            if s.reduce:  # KeyedReduce: the running fold, emitted as (key of the item, value) per item
                kept.state = item if kept.state is _NO_VALUE else s.step(kept.state, item)
                out.append((k, (s.key(item), kept.state)))  # type: ignore[misc]
                return kept
            kept.state, emitted = s.step(kept.state, item)
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(s.name, exc) from exc
        if emitted:
            out.extend((child_key(k, j), e) for j, e in enumerate(emitted))
        return kept

    def _flush(self, kept: KeyState) -> list[tuple[bytes, Any]]:
        s = self.step
        if s.on_end is None:
            return []
        try:
            emitted = s.on_end(kept.state) if s.key is None else s.on_end(kept.key, kept.state)
            return [(end_key(s.stage, kept.first, j), e) for j, e in enumerate(emitted or ())]
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(s.name, exc) from exc

