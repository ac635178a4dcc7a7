"""Run an elastream flow of declarative operators on Spark Structured Streaming.

:func:`run_flow_on_spark` translates a flow from what its operators' specs
declare (``spec.declared.transform``, key, kind; ordered-multicore §1.1), never
from their classes or from what query it is:

======================================  ==============================================================
declared transform (operator)           Spark
======================================  ==============================================================
``parquet_source`` (one FromParquet)    ``readStream`` of Parquet files, fed in order (below)
``map`` / ``filter`` / ``flat_map``     Python, inside the ``mapInArrow`` or keyed layer that feeds them
``keyed_process`` / ``keyed_reduce``    ``applyInPandasWithState`` grouped by the key's key group
``stateful_process``                    ``applyInPandasWithState`` on one constant group
``union``                               a tag on the order key (below)
``collect`` (any number of sinks)       ``foreachBatch`` into driver-side lists
======================================  ==============================================================

Coroutine operators (``spec.driver is Driver.COROUTINE``) and any operator
declaring no transform above are refused with :class:`SparkTranslationError`,
naming the operator: they are local-only. ``es.Runner(backend="spark")`` runs
the same translation behind a RunHandle (:mod:`elastream.spark.backend`).

**Modules.** This module keeps every name importable from one place; the
parts are :mod:`~elastream.spark.order_keys` (order keys, items and keys as
bytes), :mod:`~elastream.spark.plan` (the flow read into routes, keyed steps
and layers), :mod:`~elastream.spark.layers` (what runs in Spark's Python
workers), :mod:`~elastream.spark.keygroup_state` (a keyed step's state per key
group), :mod:`~elastream.spark.frames` (the query's frames and session
settings), :mod:`~elastream.spark.stream_steps` (the stream cut into steps of
files or rows), :mod:`~elastream.spark.feeding` (steps fed in order, sinks
collected), :mod:`~elastream.spark.run_folder` (the run's folder, resuming),
:mod:`~elastream.spark.driver` (:func:`run_flow_on_spark`) and
:mod:`~elastream.spark.failures` (translation and worker errors).

**One chain of layers.** A Spark query is a tree: a frame used by two
consumers is computed twice, stateful steps included. So the flow (any DAG) is
compiled into a chain: one ``mapInArrow`` right after the source, then one
``applyInPandasWithState`` per *keyed layer* (layer ``d`` holds the keyed steps
with ``d`` keyed steps on their longest path from the source). Rows carry a
route ``r`` (the operator they go to) and the key group ``p`` of that
operator's key (the local engine's, :mod:`elastream.operators.keygroups`);
a layer groups by (``r``, ``p``), steps the key groups of its own operators (one
Python call per key group per micro-batch, whose Spark state holds the states
of all its keys: :mod:`~elastream.spark.keygroup_state`), runs their outputs on
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
``i`` puts its data (``files_per_batch`` files linked, or ``rows_per_batch``
rows written as a few slice files Spark reads in parallel; every file named by
its stream position) plus one *control* file (its marker) into a fresh folder
and renames it into the watched folder, so a listing sees a whole step or
nothing; the next step is fed only when marker ``i`` has reached the sink. Each
micro-batch therefore holds whole steps, in order, and the marker's round trip
is the step's latency. A first step with a marker only warms the query up
(planning, Python workers) before the clock starts.

**End of stream, exactly once per key, in the last batch.** The last data
step's control file also holds the end (-1). The source layer turns it into an
end row for the sinks and an *end copy* for every key group of every keyed
step (route, key group), so every group is called in that batch: it steps its
data rows, then flushes every key it holds (``on_end``) and leaves the state
store, so no hook runs twice. A later layer runs in the same batch after the
earlier ones, so its groups get the earlier layers' flushed outputs together
with their own end copy, step them, then flush. A stateful step is one group,
so it is called (and flushes) even when no data reached it, as locally. No
timeout, watermark or extra micro-batch is involved: the run ends when the end
row reaches the sink.

**Resuming.** A run whose folder (``checkpoint_dir``) is kept writes each
micro-batch the sinks get beside Spark's checkpoint; run again on the same
folder after a failure or a stop, the same flow resumes from the checkpoint
(Spark replays the batch that did not commit, the driver feeds only the steps
not yet published) and gives the answer of an uninterrupted run.

Spark's analyzer refuses more than one ``applyInPandasWithState`` per query
(its JVM twin ``flatMapGroupsWithState`` is allowed several times in append
mode); the translator turns that check off for the query it starts: every
layer runs in append mode, without timeouts, and emits each row once.

Threading: call :func:`run_flow_on_spark` from one driver thread; Spark calls
the sink callback on its own thread (guarded by a condition variable). The
operators' functions run in Spark's Python workers. Importing this module
imports no pyspark.

Example::

    flow = es.Flow("counts")
    s = flow.source(es.ops.FromParquet(files), name="src").map(lambda r: r["user"])
    s.key_by(lambda u: u).reduce(lambda n, _: n + 1, initial=int).sink(es.ops.Collect(), name="out")
    result = run_flow_on_spark(flow)
    result.outputs["out"]        # == es.Runner(threads=1).run(flow).outputs["out"]
"""

from __future__ import annotations

from elastream.spark.driver import SparkRunResult, run_flow_on_spark
from elastream.spark.failures import SparkTranslationError, fail_in_worker, query_error
from elastream.spark.feeding import Collector, Feeder, RunStopped
from elastream.spark.frames import flow_frame, source_frame
from elastream.spark.keygroup_state import KeyGroupCall
from elastream.spark.layers import COLUMNS, CTL_COLUMN, ROWS_SCHEMA, SEQ_COLUMN, KeyedLayer, Row, SourceLayer
from elastream.spark.order_keys import END_KEY, MARKER_KEY, ROW_BITS, child_key, dumps, end_key, is_control, \
    key_bytes, loads, marker_key, port_key, source_key
from elastream.spark.plan import CONTROL_ROUTE, FlowPlan, KeyedStep, KeySpec, Route, plan_flow

__all__ = [
    "COLUMNS", "CONTROL_ROUTE", "CTL_COLUMN", "END_KEY", "MARKER_KEY", "ROWS_SCHEMA", "ROW_BITS", "SEQ_COLUMN",
    "Collector", "Feeder", "FlowPlan", "KeyGroupCall", "KeySpec", "KeyedLayer", "KeyedStep", "Route", "Row",
    "RunStopped", "SparkRunResult", "SparkTranslationError", "child_key", "dumps", "end_key", "fail_in_worker",
    "flow_frame", "is_control", "key_bytes", "loads", "marker_key", "plan_flow", "port_key", "query_error",
    "run_flow_on_spark", "source_frame", "source_key",
]
