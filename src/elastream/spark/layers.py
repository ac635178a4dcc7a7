"""What runs in Spark's Python workers: the ``mapInArrow`` source layer and the keyed layers' state functions.

A row on its way carries an order key ``k`` (:mod:`elastream.spark.order_keys`),
its pickled item ``v``, a route ``r`` (the index of the operator it goes to)
and the key group ``p`` of that operator's key
(:meth:`~elastream.spark.plan.KeySpec.group_of`). :class:`SourceLayer` turns
Parquet batches into dicts with source order keys and runs them through the
stateless operators up to the first keyed steps or sinks; a :class:`KeyedLayer`
steps the key groups of its own keyed steps, one call per key group, in
order-key order (:mod:`elastream.spark.keygroup_state`) and passes every other
row through. Fan-out copies a row per consumer; nothing runs twice.

Control rows (keys starting with 00) carry no item: a step's marker goes to the
sinks only; the end of stream goes to the sinks and, as an *end copy*, to every
key group of every keyed step, so each group flushes its keys' ``on_end`` in the
very batch that carries the end (a later layer's groups get the earlier layers'
flushed outputs in that batch too, before their own end copy is acted on).

Threading: instances are built on the driver and pickled to the workers;
Spark calls them there, one batch or one group at a time per worker.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from elastream.spark.failures import fail_in_worker
from elastream.spark.keygroup_state import KeyGroupCall
from elastream.operators.keygroups import stable_hash
from elastream.spark.order_keys import CHILD_TAG, END_KEY, PORT_TAG, SOURCE_TAG, child_key, dumps, marker_key
from elastream.spark.plan import CONTROL_ROUTE, KeyedStep, KeySpec, Route

# -- the row format -------------------------------------------------------------------------------------------------

#: Columns the driver adds to the source rows: control (a step number, -1 for the end, null for data) and
#: sequence number (file number << ROW_BITS | row in file).
CTL_COLUMN, SEQ_COLUMN = "_elastream_ctl", "_elastream_seq"
#: The schema of the rows between layers, and its columns.
ROWS_SCHEMA = "k binary, v binary, r long, p long"
COLUMNS = ("k", "v", "r", "p")


# -- rows ----------------------------------------------------------------------------------------------------------

class _Control:
    """Stands for the item of a control row (markers and end of stream carry none)."""


_CONTROL = _Control()
#: A row on its way: (order key, item or _CONTROL, route, key group).
Row = tuple[bytes, Any, int, int]


#: Delivers one item (with its order key) to an operator and on through the stateless ones after it, appending
#: the rows that reach a keyed step or a sink to ``out``.
Deliver = Callable[[bytes, Any, list], None]
#: The order-key suffixes of a FlatMap's first outputs (child_key's), made once.
_CHILD_SUFFIXES = tuple(CHILD_TAG + j.to_bytes(4, "big") for j in range(64))


def compile_deliveries(routes: Sequence[Route]) -> list[tuple[Deliver, ...]]:
    """Per route, one function per consumer that runs an item from that consumer on (module docstring).

    Built once per layer in a worker: each function holds its operator's
    function and the functions of the consumers after it, so a row costs a few
    plain calls rather than a walk over the routes.
    """
    built: dict[tuple[int, int], Deliver] = {}

    def into(target: int, port: int) -> Deliver:
        if (target, port) not in built:
            nexts = tuple(into(c, p) for c, p in routes[target].consumers)
            built[target, port] = _delivery(routes[target], target, port, nexts)
        return built[target, port]

    return [tuple(into(c, p) for c, p in route.consumers) for route in routes]


def _delivery(route: Route, target: int, port: int, nexts: tuple[Deliver, ...]) -> Deliver:
    """The :data:`Deliver` of one operator: rows for keyed steps and sinks, or its function's outputs passed on."""
    if route.what == "keyed":
        assert route.key is not None
        return _into_keyed(route.key, target)
    if route.what == "sink":
        return lambda k, item, out: out.append((k, item, target, 0))
    if route.what == "union":
        tag = PORT_TAG + bytes([port])
        return lambda k, item, out: _pass_on(nexts, k + tag, item, out)
    assert route.fn is not None
    fn, name = route.fn, route.name
    if route.what == "map":
        def deliver_map(k: bytes, item: Any, out: list) -> None:
            try:
                y = fn(item)
            except Exception as exc:  # noqa: BLE001 - any user error, reported with the operator's name
                raise fail_in_worker(name, exc) from exc
            _pass_on(nexts, k, y, out)
        return deliver_map
    if route.what == "filter":
        def deliver_filter(k: bytes, item: Any, out: list) -> None:
            try:
                kept = fn(item)
            except Exception as exc:  # noqa: BLE001
                raise fail_in_worker(name, exc) from exc
            if kept:
                _pass_on(nexts, k, item, out)
        return deliver_filter

    def deliver_flat_map(k: bytes, item: Any, out: list) -> None:
        try:
            ys = list(fn(item))
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(name, exc) from exc
        for j, y in enumerate(ys):
            _pass_on(nexts, k + _CHILD_SUFFIXES[j] if j < 64 else child_key(k, j), y, out)
    return deliver_flat_map


def _pass_on(nexts: tuple[Deliver, ...], k: bytes, item: Any, out: list) -> None:
    for deliver in nexts:
        deliver(k, item, out)


def _into_keyed(spec: KeySpec, target: int) -> Deliver:
    """Rows for keyed step ``target``, with the key group of their key (the local engine's)."""
    key_fn, groups, name = spec.key, spec.groups, spec.name
    if key_fn is None:
        return lambda k, item, out: out.append((k, item, target, 0))

    def deliver_keyed(k: bytes, item: Any, out: list) -> None:
        try:
            group = stable_hash(key_fn(item)) % groups
        except Exception as exc:  # noqa: BLE001 - the key function is the keyed operator's code
            raise fail_in_worker(name, exc) from exc
        out.append((k, item, target, group))
    return deliver_keyed


def _control_rows(ctl: int, key_groups: Sequence[tuple[int, int]]) -> list[Row]:
    """The rows of control value ``ctl``: a step's marker for the sinks; or the end of stream (``ctl`` < 0) for
    the sinks and for every key group of every keyed step (``key_groups``: (route, groups) pairs)."""
    if ctl >= 0:
        return [(marker_key(ctl), _CONTROL, CONTROL_ROUTE, 0)]
    rows = [(END_KEY, _CONTROL, CONTROL_ROUTE, 0)]
    for route, groups in key_groups:
        rows.extend((END_KEY, _CONTROL, route, g) for g in range(groups))
    return rows


def _columns(rows: list[Row]) -> tuple[list[bytes], list[bytes], list[int], list[int]]:
    """Rows as the k, v, r, p columns (items pickled; a control row's item as empty bytes)."""
    if not rows:
        return [], [], [], []
    ks, items, rs, ps = (list(c) for c in zip(*rows))
    return ks, [b"" if item is _CONTROL else _pickled(item) for item in items], rs, ps


def _pickled(item: Any) -> bytes:
    try:
        return pickle.dumps(item, 5)
    except (pickle.PicklingError, AttributeError, TypeError):  # lambdas inside: order_keys.dumps copes
        return dumps(item)


@dataclass(frozen=True)
class SourceLayer:
    """The ``mapInArrow`` right after the source: rows become dicts (as the local FromParquet makes them),
    get source order keys, and run through the stateless operators up to the first keyed steps or sinks."""

    routes: tuple[Route, ...]
    source: int
    columns: tuple[str, ...]
    key_groups: tuple[tuple[int, int], ...]

    @cached_property
    def deliveries(self) -> list[tuple[Deliver, ...]]:
        """:func:`compile_deliveries` of the routes, built in the worker on first use (never pickled)."""
        return compile_deliveries(self.routes)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from elastream.ops.arrow_rows import rows_of

        consumers = self.deliveries[self.source]
        for batch in batches:
            out: list[Row] = []
            rows = rows_of(batch.select(list(self.columns)))
            seqs = batch.column(SEQ_COLUMN).to_pylist()
            for row, seq, ctl in zip(rows, seqs, batch.column(CTL_COLUMN).to_pylist()):
                if ctl is not None:
                    out.extend(_control_rows(ctl, self.key_groups))
                    continue
                k = SOURCE_TAG + seq.to_bytes(8, "big")  # source_key, inlined: once per stream row
                for deliver in consumers:
                    deliver(k, row, out)
            if out:
                ks, vs, rs, ps = _columns(out)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(ks, pa.binary()), pa.array(vs, pa.binary()), pa.array(rs, pa.int64()),
                     pa.array(ps, pa.int64())], names=list(COLUMNS))


@dataclass(frozen=True)
class KeyedLayer:
    """The ``applyInPandasWithState`` function of one layer of keyed steps (module docstring).

    A Spark group is (route, key group): the groups of this layer's steps are
    stepped in order-key order, one call per key group
    (:class:`~elastream.spark.keygroup_state.KeyGroupCall`), and their outputs
    run on through the stateless operators that follow; every other group (rows
    for later layers, control rows) passes through unchanged.
    """

    routes: tuple[Route, ...]
    steps: dict[int, KeyedStep]

    @cached_property
    def deliveries(self) -> list[tuple[Deliver, ...]]:
        """:func:`compile_deliveries` of the routes, built in the worker on first use (never pickled)."""
        return compile_deliveries(self.routes)

    def __call__(self, group: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        route = int(group[0])
        step = self.steps.get(route)
        if step is None:
            for frame in frames:
                yield frame[list(COLUMNS)]
            return
        outputs = KeyGroupCall(step, state).run(frames)
        rows: list[Row] = []
        consumers = self.deliveries[route]
        for k, item in outputs:
            for deliver in consumers:
                deliver(k, item, rows)
        if rows:
            import pandas as pd

            yield pd.DataFrame(dict(zip(COLUMNS, _columns(rows))))
