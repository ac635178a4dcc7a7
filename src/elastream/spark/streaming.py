"""Run an elastream flow of declarative operators on Spark Structured Streaming.

:func:`run_flow_on_spark` translates a flow from what its operators declare
(kind, key, functions; ordered-multicore §1.1), never from what query it is:

=================================  ===================================================================
operator                           Spark
=================================  ===================================================================
``FromParquet`` (one source)       ``readStream`` of Parquet files, fed in order (below)
``Map`` / ``Filter`` / ``FlatMap``  Python, inside the ``mapInArrow`` or keyed layer that feeds them
``KeyedProcess`` / ``KeyedReduce``  ``applyInPandasWithState`` grouped by the operator's key
``StatefulProcess``                ``applyInPandasWithState`` on one constant key
``Union``                          a tag on the order key (below)
``Collect`` (any number of sinks)  ``foreachBatch`` into driver-side lists
=================================  ===================================================================

Coroutine operators (``es.Operator`` subclasses with ``process``) and any other
operator are refused with :class:`SparkTranslationError`, naming the operator:
they are local-only.

**One chain of layers.** A Spark query is a tree: a frame used by two
consumers is computed twice, stateful steps included. So the flow (any DAG) is
compiled into a chain: one ``mapInArrow`` right after the source, then one
``applyInPandasWithState`` per *keyed layer* (layer ``d`` holds the keyed steps
with ``d`` keyed steps on their longest path from the source). Rows carry a
route ``r`` (the operator they go to) and a group ``g`` (the pickled key of that
operator); a layer steps the groups of its own operators, runs their outputs on
through the stateless operators that follow, and passes every other row
through. Fan-out copies a row per consumer; nothing runs twice.

**Order.** ``v`` is the pickled Python item (no schema needed) and ``k`` an
*order key*: bytes that sort like the item's position in a sequential
one-tuple-at-a-time run (DESIGN.md: same outputs, in order, whatever the
backend). A source row's key is ``01 | seq`` (file number, row in file); the
``j``-th output of an input that may give several appends ``02 | j``; an input
of a Union appends ``04 | port``; the ``on_end`` outputs of keyed step ``s`` for
a key first seen at input ``f`` are ``03 | s | f | 00 | 02 | j``, after every
data row and in first-seen key order, as the local engine flushes them. Keyed
steps sort each group's rows by ``k`` before stepping; the driver sorts each
sink's outputs by ``k``. A Union thus delivers, per source row, what each input
made of it in port order (its interleaving is not defined locally either).

**Feeding the files in order.** Spark's file source orders new files by
modification time, not by name, so the driver itself feeds the stream: step
``i`` links ``files_per_batch`` files (named by their stream position) plus one
*marker* file into a fresh folder and renames it into the watched folder, so a
listing sees a whole step or nothing; the next step is fed only when marker
``i`` has reached the sink. Each micro-batch therefore holds whole steps, in
order, and the marker's round trip is the step's latency. A first step with a
marker only warms the query up (planning, Python workers) before the clock
starts.

**End of stream, exactly once per key.** Keyed steps use event-time timeouts
on a synthetic event time: data rows carry 2000-01-01, and after the last step
the driver feeds an *end* file whose row carries 2100-01-01. The end row passes
every layer, so every watermark moves past the keys' timeout (2050-01-01) at
the end of that batch and never before. In the next (no-data) batch every key
still in state times out once and its ``on_end`` runs; a key that receives rows
in that batch (the ``on_end`` outputs of an earlier layer, which runs first in
the same batch) sees the watermark past the timeout, steps them and flushes at
once. Flushed keys leave the state store, so no hook runs twice; a stateful
step gets its own copy of every control row, so it exists (and flushes) even
when no data reaches it, as locally. The driver waits for the end row at the
sink, then ``processAllAvailable`` returns after that flushing batch.

Spark's analyzer refuses more than one ``applyInPandasWithState`` per query
(its JVM twin ``flatMapGroupsWithState`` is allowed several times in append
mode); the translator turns that check off for the query it starts, because
every layer here runs in append mode with its own watermark, and it checks
after the run that no row was dropped as late.

Threading: call :func:`run_flow_on_spark` from one driver thread; Spark calls
the sink callback on its own thread (guarded by a condition variable). The
operators' functions run in Spark's Python workers.

Example::

    flow = es.Flow("counts")
    s = flow.source(es.ops.FromParquet(files), name="src").map(lambda r: r["user"])
    s.key_by(lambda u: u).reduce(lambda n, _: n + 1, initial=int).sink(es.ops.Collect(), name="out")
    result = run_flow_on_spark(flow)
    result.outputs["out"]        # == es.Runner(threads=1).run(flow).outputs["out"]
"""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.errors import FlowValidationError, OperatorError
from elastream.operators.base import Operator

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from elastream.graph.flow import Flow

# -- order keys -----------------------------------------------------------------------------------------------------

_SOURCE_TAG, _CHILD_TAG, _END_TAG, _PORT_TAG = b"\x01", b"\x02", b"\x03", b"\x04"
#: Control rows (markers, end of stream) have keys starting with 00, which no data key does.
_MARKER_KEY, _END_KEY = b"\x00M", b"\x00E"
#: Bits of the row number in a source sequence number (the file number takes the bits above).
_ROW_BITS = 36


def source_key(seq: int) -> bytes:
    """The order key of the ``seq``-th source row (``seq`` = file number << 36 | row in file)."""
    return _SOURCE_TAG + seq.to_bytes(8, "big")


def child_key(k: bytes, j: int) -> bytes:
    """The order key of the ``j``-th output of the input with key ``k``."""
    return k + _CHILD_TAG + j.to_bytes(4, "big")


def end_key(stage: int, first: bytes, j: int) -> bytes:
    """The key of the ``j``-th end-of-stream output of keyed step ``stage`` for a key first seen at ``first``.

    The 00 after ``first`` sorts a key that is a prefix of another first, as
    tuples sort; ``03`` puts every end output after every data row.
    """
    return _END_TAG + stage.to_bytes(2, "big") + first + b"\x00" + _CHILD_TAG + j.to_bytes(4, "big")


def is_control(k: bytes) -> bool:
    """Whether ``k`` is a marker or end-of-stream row (not data)."""
    return k[:1] == b"\x00"


# -- values and keys as bytes ---------------------------------------------------------------------------------------

def dumps(obj: Any) -> bytes:
    """Pickle an item or a state; cloudpickle for what plain pickle refuses (lambdas inside)."""
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(obj, protocol=5)


def loads(data: bytes) -> Any:
    """The object :func:`dumps` pickled."""
    return pickle.loads(data)


def key_bytes(key: Any) -> bytes:
    """The grouping bytes of a key: equal for keys Python's dicts treat as equal (ints, floats, str, tuples).

    Pickled without a memo (so ``("a", "a")`` pickles alike whether or not both
    strings are one object), after mapping bools, integral floats and numpy
    scalars to ints, as ``1 == 1.0 == True`` share one dict slot.
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True
    pickler.dump(_canonical(key))
    return buffer.getvalue()


def _canonical(key: Any) -> Any:
    if type(key) is tuple:
        return tuple(_canonical(k) for k in key)
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if type(key).__module__ == "numpy" and hasattr(key, "item"):
        return _canonical(key.item())
    return key


# -- translation errors ---------------------------------------------------------------------------------------------

class SparkTranslationError(FlowValidationError):
    """A flow cannot run on Spark; ``operator`` names the operator that stays local-only."""


_FAILURE = re.compile(r"\[elastream operator '([^']+)'\] ([^\n]*)")


def _fail_in_worker(name: str, exc: Exception) -> RuntimeError:
    """The error a step raises in a Spark worker; the driver finds the operator name in it (:func:`_query_error`)."""
    return RuntimeError(f"[elastream operator '{name}'] {type(exc).__name__}: {exc}")


# -- the plan: what each operator declares --------------------------------------------------------------------------

#: The route of control rows that travel to the sinks (markers, end of stream).
CONTROL_ROUTE = -1
_STATEFUL_GROUP = b"*"


@dataclass(frozen=True, slots=True)
class KeySpec:
    """How the rows bound for keyed step ``name`` get their group: by ``key`` (partitioned), or all in one."""

    name: str
    key: Callable[[Any], Any] | None

    def group(self, item: Any) -> bytes:
        """The group bytes of a data item."""
        if self.key is None:
            return _STATEFUL_GROUP
        try:
            return key_bytes(self.key(item))
        except Exception as exc:  # noqa: BLE001 - the key function is the keyed operator's code
            raise _fail_in_worker(self.name, exc) from exc


@dataclass(frozen=True, slots=True)
class KeyedStep:
    """A partitioned (KeyedProcess, KeyedReduce) or stateful (StatefulProcess) operator, as declared.

    ``reduce`` marks a KeyedReduce (``step`` is then ``fn(acc, item)`` and
    ``factory`` its optional ``initial``); ``stage`` numbers it in the flow.
    """

    name: str
    stage: int
    key: Callable[[Any], Any] | None
    step: Callable[..., Any]
    factory: Callable[[], Any] | None
    on_end: Callable[..., Iterable[Any]] | None
    reduce: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """What a row delivered to operator ``name`` goes through, and where its outputs go next.

    ``what`` is "map", "filter", "flat_map" (``fn``), "union", "keyed"
    (grouped by ``key``), "sink" or "source"; ``consumers`` are (operator
    index, input port) pairs.
    """

    name: str
    what: str
    fn: Callable[..., Any] | None = None
    key: KeySpec | None = None
    consumers: tuple[tuple[int, int], ...] = ()


def _classify(name: str, op: Operator, stage: int) -> tuple[str, Any]:
    """What ``op`` declares: (what, function or KeyedStep); SparkTranslationError when it is local-only."""
    from elastream.ops.file_sources import FromParquet
    from elastream.ops.keyed import KeyedProcess, KeyedReduce, StatefulProcess
    from elastream.ops.sinks import Collect
    from elastream.ops.transforms import Filter, FlatMap, Map, Union

    simple = {Map: ("map", "fn"), Filter: ("filter", "pred"), FlatMap: ("flat_map", "fn")}
    for cls, (what, attr) in simple.items():
        if isinstance(op, cls):
            return what, getattr(op, attr)
    if isinstance(op, KeyedProcess):
        return "keyed", KeyedStep(name, stage, op.key, op.step, op.state_factory, op.on_end)
    if isinstance(op, KeyedReduce):
        return "keyed", KeyedStep(name, stage, op.key, op.fn, op.initial, None, reduce=True)
    if isinstance(op, StatefulProcess):
        return "keyed", KeyedStep(name, stage, None, op.step, op.state_factory, op.on_end)
    for cls, what in ((Union, "union"), (Collect, "sink"), (FromParquet, "source")):
        if isinstance(op, cls):
            return what, None
    if op.kind == "coroutine" or type(op).process is not Operator.process:
        why = "is a coroutine operator (async def process)"
    else:
        why = f"is not a declarative operator the Spark translator knows (kind {op.kind!r})"
    raise SparkTranslationError(
        f"operator {name!r} ({op.describe()}) {why}: it is local-only; Spark runs Map, Filter, FlatMap, "
        "KeyedProcess, KeyedReduce, StatefulProcess and Union between one FromParquet source and Collect sinks",
        operator=name)


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """A flow read for Spark: one :class:`Route` per operator (by index), keyed steps grouped into layers.

    Layer ``d`` holds the keyed steps with ``d`` keyed steps on their longest
    path from the source (themselves included); each layer becomes one
    ``applyInPandasWithState``, and the stateless operators run inside the
    layer that produces their input (or right after the source).
    """

    routes: tuple[Route, ...]
    keyed: dict[int, KeyedStep]
    layers: tuple[tuple[int, ...], ...]
    source: int
    sinks: dict[int, str]

    @property
    def stateful(self) -> tuple[int, ...]:
        """The stateful (one-instance) steps: each gets its own copy of every control row."""
        return tuple(i for i, s in self.keyed.items() if s.key is None)


def plan_flow(flow: Flow) -> FlowPlan:
    """Check that ``flow`` can run on Spark and read what each operator declares.

    Raises :class:`SparkTranslationError` naming the first operator that is
    local-only (a coroutine operator, a non-Parquet source, another sink), or
    when the flow has more than one source or a feedback loop.
    """
    flow.validate()
    names = list(flow.operators)
    index = {n: i for i, n in enumerate(names)}
    declared = [_classify(n, flow[n].operator, i + 1) for i, n in enumerate(names)]
    consumers: list[list[tuple[int, int]]] = [[] for _ in names]
    inputs: list[list[int]] = [[] for _ in names]
    for c in flow.connections:
        consumers[index[c.src]].append((index[c.dst], c.dst_port))
        inputs[index[c.dst]].append(index[c.src])
    sources = [n for n, (what, _) in zip(names, declared) if what == "source"]
    if len(sources) != 1:
        raise SparkTranslationError(f"flow {flow.name!r} has {len(sources)} sources {sources}; the Spark "
                                    "translator feeds exactly one FromParquet stream in order",
                                    operator=sources[1] if sources else None)
    keyed = {i: s for i, (what, s) in enumerate(declared) if what == "keyed"}
    depth = _keyed_depths(names, inputs, keyed)
    routes = tuple(Route(n, what, None if what == "keyed" else fn,
                         KeySpec(n, fn.key) if what == "keyed" else None, tuple(consumers[i]))
                   for i, (n, (what, fn)) in enumerate(zip(names, declared)))
    layers = tuple(tuple(i for i in keyed if depth[i] == d) for d in range(1, max(depth, default=0) + 1))
    return FlowPlan(routes, keyed, layers, index[sources[0]],
                    {i: n for i, (n, (what, _)) in enumerate(zip(names, declared)) if what == "sink"})


def _keyed_depths(names: list[str], inputs: list[list[int]], keyed: Mapping[int, KeyedStep]) -> list[int]:
    """Per operator, the most keyed steps on a path from the source to it (itself included)."""
    depth: dict[int, int] = {}
    visiting: set[int] = set()

    def visit(i: int) -> int:
        if i in depth:
            return depth[i]
        if i in visiting:
            raise SparkTranslationError(f"operator {names[i]!r} is on a feedback loop: loops are local-only",
                                        operator=names[i])
        visiting.add(i)
        depth[i] = max((visit(j) for j in inputs[i]), default=0) + (1 if i in keyed else 0)
        return depth[i]

    return [visit(i) for i in range(len(names))]


# -- what runs in Spark's Python workers ----------------------------------------------------------------------------

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
        results = [(k + _PORT_TAG + bytes([port]), item)]
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
        raise _fail_in_worker(route.name, exc) from exc


def _control_rows(k: bytes, stateful: Sequence[int]) -> list[Row]:
    """A control row for the sinks, and a copy for each stateful step (it must see the end row)."""
    return [(k, _CONTROL, CONTROL_ROUTE, b""), *((k, _CONTROL, s, _STATEFUL_GROUP) for s in stateful)]


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

        from elastream.ops.file_sources import rows_of

        consumers = self.routes[self.source].consumers
        for batch in batches:
            out: list[Row] = []
            rows = rows_of(batch.select(list(self.columns)))
            seqs = batch.column(_SEQ_COLUMN).to_pylist()
            for row, seq, ctl in zip(rows, seqs, batch.column(_CTL_COLUMN).to_pylist()):
                if ctl is not None:
                    out.extend(_control_rows(_END_KEY if ctl < 0 else _MARKER_KEY + ctl.to_bytes(8, "big"),
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
            raise _fail_in_worker(self.step.name, exc) from exc

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
            raise _fail_in_worker(s.name, exc) from exc
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
            raise _fail_in_worker(s.name, exc) from exc


# -- Spark frames ---------------------------------------------------------------------------------------------------

_CTL_COLUMN, _SEQ_COLUMN, _ET_COLUMN = "_elastream_ctl", "_elastream_seq", "_elastream_et"
_ROWS = "k binary, v binary, r long, g binary"
#: Synthetic event times (seconds): data rows, the keys' timeout, the end row (module docstring).
DATA_TIME_S, TIMEOUT_S, END_TIME_S = 946_684_800, 2_524_608_000, 4_102_444_800
TIMEOUT_MS = TIMEOUT_S * 1000
#: Watermark delay: data rows (2000-01-01) are never "late" against the watermark they make.
WATERMARK_DELAY = "1 day"


def flow_frame(plan: FlowPlan, source: DataFrame, columns: tuple[str, ...]) -> DataFrame:
    """The Spark frame of a plan: the source layer, then one keyed layer after another (no operator twice)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    frame = source.mapInArrow(SourceLayer(plan.routes, plan.source, columns, plan.stateful), _ROWS)
    for layer in plan.layers:
        steps = {i: plan.keyed[i] for i in layer}
        frame = _with_event_time(frame).groupBy("r", "g").applyInPandasWithState(
            KeyedLayer(plan.routes, steps), _ROWS, "s binary", "append", GroupStateTimeout.EventTimeTimeout)
    return frame


def _with_event_time(frame: DataFrame) -> DataFrame:
    """Add the synthetic event time and a watermark on it (a keyed step's input must carry one)."""
    from pyspark.sql import functions as F

    k = F.col("k")
    ends = (k >= F.lit(bytearray(_END_TAG))) | (k == F.lit(bytearray(_END_KEY)))
    et = F.when(ends, F.lit(END_TIME_S)).otherwise(F.lit(DATA_TIME_S)).cast("timestamp")
    return frame.withColumn(_ET_COLUMN, et).withWatermark(_ET_COLUMN, WATERMARK_DELAY)


def _source_frame(spark: SparkSession, watched: Path, schema: Any, columns: Sequence[str]) -> DataFrame:
    """The watched folder as a stream of (columns, control, sequence number)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    full = StructType([*schema.fields, StructField(_CTL_COLUMN, LongType(), True)])
    # Spark keeps the newest file's age as "now" and ignores files older than maxFileAge (7 days by
    # default) after the first batch; linked stream files keep their own modification time.
    raw = spark.readStream.schema(full).option("maxFileAge", "36500d").parquet(str(watched / "*"))
    file_no = F.substring(F.col("_metadata.file_name"), 2, 9).cast("long")
    seq = F.shiftleft(file_no, _ROW_BITS) + F.col("_metadata.row_index")
    return raw.select(*[F.col(c) for c in columns], F.col(_CTL_COLUMN), seq.alias(_SEQ_COLUMN))


# -- feeding the stream and collecting the sinks --------------------------------------------------------------------

class _Collector:
    """The ``foreachBatch`` target: keeps (order key, pickled item) per sink and stamps control rows."""

    def __init__(self, sinks: Mapping[int, str]) -> None:
        self.sinks = dict(sinks)
        self.rows: dict[str, list[tuple[bytes, bytes]]] = {name: [] for name in self.sinks.values()}
        self.arrived: dict[bytes, float] = {}
        self.batches = 0
        self._cond = threading.Condition()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.select("k", "v", "r").collect()
        now = time.perf_counter()
        with self._cond:
            self.batches += 1
            for k, v, r in rows:
                if r == CONTROL_ROUTE:
                    self.arrived.setdefault(bytes(k), now)
                else:
                    self.rows[self.sinks[r]].append((bytes(k), bytes(v)))
            self._cond.notify_all()

    def wait_for(self, key: bytes, query: Any, timeout_s: float | None) -> float:
        """Block until the control row ``key`` reached a sink; its arrival time. Raises if the query died."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while key not in self.arrived:
                if not query.isActive:
                    raise _query_error(query.exception())
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"Spark streaming query did not finish within {timeout_s} s")
                self._cond.wait(0.2)
            return self.arrived[key]

    def outputs(self) -> dict[str, list[Any]]:
        """Each sink's items in order-key order (the sequential run's order)."""
        return {name: [loads(v) for _, v in sorted(rows)] for name, rows in self.rows.items()}


class _Feeder:
    """Places the stream files into the watched folder one step at a time (module docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.watched = root / "in"
        self._staging = root / "staging"
        self.watched.mkdir(parents=True)
        self._staging.mkdir()

    def place(self, step: int, files: Sequence[tuple[int, Path]], control: int) -> float:
        """Link ``files`` (position, path) and a control file, then publish them as one folder; the time."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = self._staging / f"{step:09d}"
        folder.mkdir()
        for position, path in files:
            _link(path, folder / f"d{position:09d}.parquet")
        pq.write_table(pa.table({_CTL_COLUMN: pa.array([control], pa.int64())}), folder / f"c{step:09d}.parquet")
        folder.rename(self.watched / folder.name)  # atomic: a listing sees the whole step or nothing
        return time.perf_counter()


def _link(src: Path, dst: Path) -> None:
    try:
        os.symlink(src.resolve(), dst)
    except OSError:  # a file system without symbolic links
        shutil.copyfile(src, dst)


def _query_error(exc: Any) -> Exception:
    """An OperatorError naming the operator when a step failed in a worker; else a RuntimeError."""
    text = str(exc) if exc is not None else "the streaming query stopped"
    m = _FAILURE.search(text)
    if m is None:
        return RuntimeError(f"Spark streaming query failed: {text}")
    return OperatorError(m.group(1), RuntimeError(m.group(2)), text)


# -- the public entry point -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SparkRunResult:
    """What :func:`run_flow_on_spark` returns.

    ``outputs`` maps each Collect sink's name to its items in order;
    ``seconds`` runs from the first data step fed to the end of the flushing
    batch (after a warm-up step that only carries a marker);
    ``rows_in`` counts the source rows; ``step_latencies_ms`` is each step's
    marker round trip (fed → seen at the sink), the last one being the end of
    stream; ``batches`` counts the micro-batches the sinks saw.
    """

    outputs: dict[str, list[Any]]
    seconds: float
    rows_in: int
    batches: int
    step_latencies_ms: tuple[float, ...]

    @property
    def tuples_per_second(self) -> float:
        """Source rows per second."""
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_p50_ms(self) -> float | None:
        """Median step latency (data steps only), ms."""
        return _percentile(self.step_latencies_ms[:-1], 50)

    @property
    def latency_p99_ms(self) -> float | None:
        """99th-percentile step latency (nearest rank, data steps only), ms."""
        return _percentile(self.step_latencies_ms[:-1], 99)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(min(rank, len(ordered))) - 1]


#: Session settings a run needs (module docstring), restored once the query has started.
_QUERY_CONF = {
    "spark.sql.streaming.unsupportedOperationCheck": "false",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
}


def run_flow_on_spark(flow: Flow, *, spark: SparkSession | None = None, checkpoint_dir: str | Path | None = None,
                      source_files: Mapping[str, Sequence[Path]] | None = None, files_per_batch: int = 1,
                      shuffle_partitions: int | None = None, timeout_s: float | None = None) -> SparkRunResult:
    """Run ``flow`` on Spark Structured Streaming; the same sink outputs, in order, as a sequential local run.

    ``spark``: the session (default :func:`elastream.spark.session.get_session`).
    ``checkpoint_dir``: where the query keeps its checkpoint and the fed files
    (must be empty or absent; kept afterwards); default a temporary folder,
    removed afterwards. ``source_files``: the source's files in stream order
    by source name (default what its FromParquet reads). ``files_per_batch``:
    files per micro-batch. ``shuffle_partitions``: state partitions of the
    keyed steps (default the session's ``spark.sql.shuffle.partitions``).
    ``timeout_s``: give up (TimeoutError) when a step takes longer.

    Raises :class:`SparkTranslationError` (before Spark starts) for an
    operator that is local-only, and :class:`~elastream.errors.OperatorError`
    naming the operator whose function failed in a Spark worker.

    Needs a classic session (not Spark Connect): the sink callback keeps the
    outputs in this process. On a cluster, ``checkpoint_dir`` and the stream
    files must be on storage every executor reads (fed files are symbolic
    links to them).

    Example::

        result = run_flow_on_spark(flow, files_per_batch=2)
        result.outputs["out"], result.tuples_per_second, result.latency_p99_ms
    """
    if files_per_batch < 1:
        raise ValueError(f"files_per_batch must be >= 1, got {files_per_batch}")
    plan = plan_flow(flow)
    files, columns = _source_of(flow, plan, source_files)
    root, temporary = _checkpoint_root(checkpoint_dir)
    try:
        if spark is None:
            from elastream.spark.session import get_session

            spark = get_session()
        return _run(spark, plan, files, columns, root, files_per_batch, shuffle_partitions, timeout_s)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def _source_of(flow: Flow, plan: FlowPlan, source_files: Mapping[str, Sequence[Path]] | None
               ) -> tuple[list[Path], tuple[str, ...] | None]:
    name = plan.routes[plan.source].name
    source = flow[name].operator
    given = (source_files or {}).get(name)
    files = [Path(f) for f in (given if given is not None else source.files())]
    if not files:
        raise SparkTranslationError(f"source {name!r} has no files", operator=name)
    return files, tuple(source.columns) if source.columns is not None else None


def _checkpoint_root(checkpoint_dir: str | Path | None) -> tuple[Path, bool]:
    if checkpoint_dir is None:
        return Path(tempfile.mkdtemp(prefix="elastream-spark-")), True
    root = Path(checkpoint_dir)
    if root.exists() and any(root.iterdir()):
        # A used checkpoint would resume an old query instead of running this one from the start.
        raise FileExistsError(f"checkpoint folder {root} is not empty; give a new or empty folder")
    root.mkdir(parents=True, exist_ok=True)
    return root, False


def _run(spark: SparkSession, plan: FlowPlan, files: list[Path], columns: tuple[str, ...] | None, root: Path,
         files_per_batch: int, shuffle_partitions: int | None, timeout_s: float | None) -> SparkRunResult:
    import pyarrow.parquet as pq

    if type(spark).__module__.startswith("pyspark.sql.connect"):
        # The sink hands each micro-batch to a callback in this process, which Spark Connect cannot do.
        raise SparkTranslationError("running a flow on Spark Structured Streaming needs a classic Spark session "
                                    "(--master or the standard Spark configuration); Spark Connect "
                                    "(SPARK_REMOTE) serves the batch engine and datagen only")
    feeder = _Feeder(root)
    schema = spark.read.parquet(str(files[0])).schema
    columns = columns or tuple(schema.names)
    schema = type(schema)([schema[c] for c in columns])
    collector = _Collector(plan.sinks)
    query = _start(spark, plan, feeder, schema, columns, collector, root / "checkpoint", shuffle_partitions)
    try:
        chunks = [list(enumerate(files))[i:i + files_per_batch] for i in range(0, len(files), files_per_batch)]
        seconds, latencies = _feed(query, feeder, collector, chunks, timeout_s)
        _check_nothing_late(query)
    finally:
        query.stop()
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return SparkRunResult(collector.outputs(), seconds, rows, collector.batches, tuple(latencies))


def _feed(query: Any, feeder: _Feeder, collector: _Collector, chunks: Sequence[Sequence[tuple[int, Path]]],
          timeout_s: float | None) -> tuple[float, list[float]]:
    """Feed a warm-up step, the data steps, then the end; (seconds from the first data step, step latencies ms).

    The warm-up step (a marker only) takes the query's one-time costs (first
    planning, Python workers starting) off the clock, as the local engine's
    clock leaves out process start-up.
    """
    def step(number: int, files: Sequence[tuple[int, Path]], control: int, key: bytes) -> float:
        fed = feeder.place(number, files, control)
        return (collector.wait_for(key, query, timeout_s) - fed) * 1e3

    step(0, [], 0, _MARKER_KEY + (0).to_bytes(8, "big"))
    started = time.perf_counter()
    latencies = [step(n, chunk, n, _MARKER_KEY + n.to_bytes(8, "big")) for n, chunk in enumerate(chunks, start=1)]
    latencies.append(step(len(chunks) + 1, [], -1, _END_KEY))
    try:
        query.processAllAvailable()  # the batch after the end row: timeouts flush every key (module docstring)
    except Exception as exc:  # noqa: BLE001 - an on_end hook failed in a worker: name its operator
        raise _query_error(exc) from exc
    return time.perf_counter() - started, latencies


def _start(spark: SparkSession, plan: FlowPlan, feeder: _Feeder, schema: Any, columns: tuple[str, ...],
           collector: _Collector, checkpoint: Path, shuffle_partitions: int | None) -> Any:
    conf = dict(_QUERY_CONF)
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    with _session_conf(spark, conf), _local_workers_like_driver(spark):
        source = _source_frame(spark, feeder.watched, schema, columns)
        frame = flow_frame(plan, source, columns)
        return (frame.writeStream.foreachBatch(collector).outputMode("append")
                .option("checkpointLocation", str(checkpoint)).start())


@contextmanager
def _session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings while the query starts (a streaming query keeps its own copy), then restore them."""
    saved = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def _local_workers_like_driver(spark: SparkSession) -> Iterator[None]:
    """In local mode, build the query's Python functions for workers running this interpreter and sys.path.

    Spark starts local workers with ``python3`` from PATH unless PYSPARK_PYTHON
    is set, and without the driver's sys.path; the flow's functions need this
    interpreter's packages and the modules they were defined in (tests, notebooks).
    A function captures both when it is wrapped, so they are restored afterwards.
    """
    remote = type(spark).__module__.startswith("pyspark.sql.connect")
    sc = None if remote else spark.sparkContext
    if sc is None or not str(sc.master).startswith("local"):
        yield
        return
    saved = (sc.pythonExec, sc.environment.get("PYTHONPATH"))
    if "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable
    sc.environment["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        yield
    finally:
        sc.pythonExec = saved[0]
        if saved[1] is None:
            sc.environment.pop("PYTHONPATH", None)
        else:
            sc.environment["PYTHONPATH"] = saved[1]


def _check_nothing_late(query: Any) -> None:
    """Fail loudly if a keyed step dropped rows as late: the synthetic event times must make that impossible."""
    for progress in query.recentProgress:
        for op in progress.stateOperators:
            if op.numRowsDroppedByWatermark:
                raise RuntimeError(f"Spark dropped {op.numRowsDroppedByWatermark} rows as late in batch "
                                   f"{progress.batchId} ({op.operatorName}): the translation is wrong")
