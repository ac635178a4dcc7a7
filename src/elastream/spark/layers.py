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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.spark.failures import fail_in_worker
from elastream.spark.keygroup_state import KeyGroupCall
from elastream.spark.order_keys import END_KEY, child_key, dumps, marker_key, port_key, source_key
from elastream.spark.plan import CONTROL_ROUTE, KeyedStep, Route

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


def _deliver(routes: Sequence[Route], k: bytes, item: Any, target: int, port: int, out: list[Row]) -> None:
    """Run ``item`` through stateless operators from ``target`` on, until it reaches a keyed step or a sink."""
    route = routes[target]
    what = route.what
    if what == "keyed":
        assert route.key is not None
        out.append((k, item, target, route.key.group_of(item)))
        return
    if what == "sink":
        out.append((k, item, target, 0))
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
    """Rows as the k, v, r, p columns (items pickled)."""
    ks, vs, rs, ps = [], [], [], []
    for k, item, r, p in rows:
        ks.append(k)
        vs.append(b"" if item is _CONTROL else dumps(item))
        rs.append(r)
        ps.append(p)
    return ks, vs, rs, ps


@dataclass(frozen=True, slots=True)
class SourceLayer:
    """The ``mapInArrow`` right after the source: rows become dicts (as the local FromParquet makes them),
    get source order keys, and run through the stateless operators up to the first keyed steps or sinks."""

    routes: tuple[Route, ...]
    source: int
    columns: tuple[str, ...]
    key_groups: tuple[tuple[int, int], ...]

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
                    out.extend(_control_rows(ctl, self.key_groups))
                    continue
                k = source_key(seq)
                for consumer, port in consumers:
                    _deliver(self.routes, k, row, consumer, port, out)
            if out:
                ks, vs, rs, ps = _columns(out)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(ks, pa.binary()), pa.array(vs, pa.binary()), pa.array(rs, pa.int64()),
                     pa.array(ps, pa.int64())], names=list(COLUMNS))


@dataclass(frozen=True, slots=True)
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

    def __call__(self, group: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        route = int(group[0])
        step = self.steps.get(route)
        if step is None:
            for frame in frames:
                yield frame[list(COLUMNS)]
            return
        outputs = KeyGroupCall(step, state).run(frames)
        rows: list[Row] = []
        consumers = self.routes[route].consumers
        for k, item in outputs:
            for consumer, port in consumers:
                _deliver(self.routes, k, item, consumer, port, rows)
        if rows:
            import pandas as pd

            yield pd.DataFrame(dict(zip(COLUMNS, _columns(rows))))
