"""The five TPCx-BB queries as elastream flows of declarative operators (spec §5).

:func:`build_flow` turns a query name, a data set and a parameter object into
a :class:`QueryFlow`: an :class:`elastream.Flow` that replays the query's
ordered event stream (``ss_stream`` or ``wcs_stream``) through the operator
chain of spec §5, plus the function that turns what the sink collected into
the §4 answer table (the columns of :func:`~elastream.tpcxbb.answers.answer_schema`).

=====  ======================  ====================================================
query  chain (§5)              partition keys
=====  ======================  ====================================================
Q1     SS→SL→PS→PS→SF          ss_ticket_number; (item_sk_1, item_sk_2)
Q2     WC→SL→PS→SL→PS→SF       wcs_user_sk; co-viewed item_sk
Q3     WC→SL→PS→PS             wcs_user_sk; lastviewed item_sk
Q4     WC→SL→PS→SL→SF          wcs_user_sk
Q15    SS→SL→SL→PS             i_category_id
=====  ======================  ====================================================

Every stage is a fluent declarative operator (``flat_map`` for SL,
``key_by(k, partitions=...).process(step, state=..., on_end=...)`` for PS,
``process(step, state=..., on_end=...)`` for SF) and nothing else, so another
backend can translate the flow from the declared operators alone. Records
entering the first stage are dicts (column → value, as pyarrow's
``to_pylist`` gives them); later records are plain tuples. Static tables
(item, web_page, date_dim) are read once, here, into frozensets and dicts that
the step functions capture; they pickle with cloudpickle, so the flow can be
shipped to worker processes.

Sessions, windows and aggregates still open when the stream ends are flushed
by ``on_end`` (spec §5 "Closing sessions and windows": flushing at the end is
enough to reproduce the batch answers exactly).

Latency markers (ordered-multicore §7): with ``marker_every=N`` the source
inserts a :class:`Marker` after every N rows, stamped with
``time.perf_counter()``; every stage's functions are wrapped so that a marker
passes through unchanged (the query functions themselves never see one) and
the sink stamps its arrival. ``perf_counter`` is ``CLOCK_MONOTONIC`` on Linux,
one clock for every process of the machine, so stamps compare across worker
processes. Markers never change an answer: ``finish`` drops them.

Building a flow reads the static tables and the stream files' footers on the
caller's thread; the flow itself runs wherever the runner puts it.

Example::

    qf = build_flow("q02", Path("/tmp/tpcxbb"), Q02Params())
    result = es.Runner(threads=2).run(qf.flow)
    answer = qf.finish(result.outputs[qf.sink_name])     # pyarrow.Table, §4 columns

Modules: :mod:`.stages` (names, stream columns, :class:`QueryFlow`, the stage
builder, the item-category table), :mod:`.markers` (the latency markers), one
module per query (:mod:`.q01`, :mod:`.q02`, :mod:`.q03`, :mod:`.q04`,
:mod:`.q15`: its step functions and ``build``), and this package's
:func:`build_flow`, the entry point; every public name of those modules is
importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

import elastream as es
from elastream.graph.fluent import Stream
from elastream.ops.file_sources import FromParquet
from elastream.ops.sinks import Collect
from elastream.tpcxbb import io
from elastream.tpcxbb.answers import answer_schema
from elastream.tpcxbb.params import default_params, params_class
from elastream.tpcxbb.pipelines import q01, q02, q03, q04, q15
from elastream.tpcxbb.pipelines.markers import Marker, MarkerCollect, MarkingSource, markers_of, without_markers
from elastream.tpcxbb.pipelines.q01 import q01_basket_pairs, q01_pair_counter, q01_select, q01_top_collect, \
    q01_top_emit
from elastream.tpcxbb.pipelines.q02 import count_by_key, q02_co_viewed, q02_select, q02_sessionizer, \
    q02_top_collect, q02_top_emit
from elastream.tpcxbb.pipelines.q03 import q03_last_viewed, q03_select, q03_top, q03_view_counts
from elastream.tpcxbb.pipelines.q04 import CART_PAGE, CHECKOUT_PAGE, OTHER_PAGE, q04_abandoned_pages, q04_add, \
    q04_average, q04_emit, q04_select, q04_sessionizer
from elastream.tpcxbb.pipelines.q15 import q15_categorize, q15_fit, q15_regress, q15_select
from elastream.tpcxbb.pipelines.stages import CATEGORY_PARTITIONS, DEFAULT_PARTITIONS, SINK_NAME, SOURCE_NAME, \
    STREAM_COLUMNS, QueryFlow, Stages
from elastream.tpcxbb.schema import QUERY_STREAM

__all__ = [
    "CART_PAGE", "CATEGORY_PARTITIONS", "CHECKOUT_PAGE", "DEFAULT_PARTITIONS", "OTHER_PAGE", "SINK_NAME",
    "SOURCE_NAME", "STREAM_COLUMNS", "Marker", "MarkerCollect", "MarkingSource", "QueryFlow", "build_flow",
    "count_by_key", "markers_of", "q01_basket_pairs", "q01_pair_counter", "q01_select", "q01_top_collect",
    "q01_top_emit", "q02_co_viewed", "q02_select", "q02_sessionizer", "q02_top_collect", "q02_top_emit",
    "q03_last_viewed", "q03_select", "q03_top", "q03_view_counts", "q04_abandoned_pages", "q04_add",
    "q04_average", "q04_emit", "q04_select", "q04_sessionizer", "q15_categorize", "q15_fit", "q15_regress",
    "q15_select",
]

#: Each query's chain builder: ``build(stages, source stream, data_dir, params) -> (end stream, rows → answer)``.
_BUILDERS: dict[str, Callable[..., tuple[Stream, Callable[[list], list]]]] = {
    "q01": q01.build, "q02": q02.build, "q03": q03.build, "q04": q04.build, "q15": q15.build}


def build_flow(query: str, data_dir: Path, params: Any = None, *, marker_every: int = 0,
               batch_rows: int | None = None, partitions: int = DEFAULT_PARTITIONS) -> QueryFlow:
    """The §5 pipeline of ``query`` over the data set ``data_dir`` with ``params`` (default: spec §3).

    The stream files are validated first (columns and types, spec §2): a
    missing table, a missing column, a wrong type or an unreadable file raises
    :class:`~elastream.tpcxbb.io.TpcxbbDataError` naming the table, column and
    file. ``marker_every`` > 0 adds latency markers (module docstring);
    ``batch_rows`` is the source's Parquet decoding batch; ``partitions`` the
    partitions the keyed stages declare.

    Example::

        qf = build_flow("q04", data, Q04Params(), marker_every=1000)
        out = es.Runner(threads=2, policy="lp").run(qf.flow).outputs[qf.sink_name]
        qf.finish(out).column_names == ["avg_pages"]
    """
    if query not in _BUILDERS:
        raise KeyError(f"unknown query {query!r}; known: {', '.join(_BUILDERS)}")
    params = default_params(query) if params is None else params
    if not isinstance(params, params_class(query)):
        raise TypeError(f"{query} takes {params_class(query).__name__}, not {type(params).__name__}")
    if marker_every < 0:
        raise ValueError(f"marker_every must be >= 0, got {marker_every}")
    data_dir = Path(data_dir)
    stream_name, columns = QUERY_STREAM[query], STREAM_COLUMNS[query]
    files = io.validate(data_dir, stream_name, columns)

    flow = es.Flow(f"tpcxbb-{query}")
    source: es.SourceOperator = FromParquet(files, columns=columns, batch_rows=batch_rows)
    if marker_every:
        source = MarkingSource(source, marker_every)
    stages = Stages(markers=bool(marker_every), partitions=partitions)
    end, rows_of_answer = _BUILDERS[query](stages, flow.source(source, name=SOURCE_NAME), data_dir, params)
    end.sink(MarkerCollect() if marker_every else Collect(), name=SINK_NAME)

    schema = answer_schema(query, windowed=query == "q01" and bool(params.window_s))
    return QueryFlow(query=query, flow=flow, source_name=SOURCE_NAME, stream_name=stream_name, stream_files=files,
                     columns=columns, sink_name=SINK_NAME, marker_every=marker_every,
                     finish=partial(_finish, schema, rows_of_answer))


def _finish(schema: pa.Schema, rows_of_answer: Callable[[list], list], outputs: list) -> pa.Table:
    rows = rows_of_answer(without_markers(outputs))
    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    return pa.table([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)
