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
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from pathlib import Path
from time import perf_counter
from typing import Any

import pyarrow as pa

import elastream as es
from elastream.graph.fluent import Stream
from elastream.ops.file_sources import FromParquet
from elastream.ops.sinks import Collect
from elastream.tpcxbb import io
from elastream.tpcxbb.answers import answer_schema
from elastream.tpcxbb.params import Q01Params, Q02Params, Q03Params, Q04Params, Q15Params, default_params, \
    params_class
from elastream.tpcxbb.schema import QUERY_STREAM, SECONDS_PER_DAY

SOURCE_NAME = "stream"
SINK_NAME = "answer"
#: Partitions declared by the keyed stages (the most workers each may get, ordered-multicore §6).
DEFAULT_PARTITIONS = 8
#: Q15 is keyed by category, of which there are 9 (spec §1): more partitions would stay empty.
CATEGORY_PARTITIONS = 9

#: The stream columns each query reads (spec §2 "columns used", §5 step 1).
STREAM_COLUMNS: dict[str, tuple[str, ...]] = {
    "q01": ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_store_sk", "ss_ticket_number"),
    "q02": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_item_sk", "wcs_user_sk"),
    "q03": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_item_sk", "wcs_user_sk"),
    "q04": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_web_page_sk", "wcs_user_sk"),
    "q15": ("ss_sold_date_sk", "ss_item_sk", "ss_store_sk", "ss_net_paid"),
}


@dataclass(frozen=True, slots=True)
class QueryFlow:
    """A query's flow and how to read its answer.

    ``flow`` starts with the source ``source_name`` reading ``stream_files``
    (in that order; only ``columns``) and ends in the Collect-like sink
    ``sink_name``; ``finish(outputs)`` turns that sink's collected tuples
    into the §4 answer table.
    """

    query: str
    flow: es.Flow
    source_name: str
    stream_name: str
    stream_files: list[Path]
    columns: tuple[str, ...]
    sink_name: str
    finish: Callable[[list], pa.Table]
    marker_every: int = 0


# -- markers (ordered-multicore §7) -------------------------------------------------------------------------------


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


def _without_markers(outputs: Iterable[Any]) -> list[Any]:
    return [x for x in outputs if x.__class__ is not Marker]


# Wrappers that let markers through a stage untouched, so the query functions stay marker-free.

def _flat_map_passing_markers(fn: Callable[[Any], Iterable[Any]]) -> Callable[[Any], Iterable[Any]]:
    def flat_map(x: Any) -> Iterable[Any]:
        return (x,) if x.__class__ is Marker else fn(x)
    flat_map.__name__ = getattr(fn, "__name__", "flat_map")
    return flat_map


def _key_passing_markers(key: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # Markers share one key of their own (the Marker class: a pickled class keeps its identity).
    def marker_key(x: Any) -> Any:
        return Marker if x.__class__ is Marker else key(x)
    return marker_key


def _step_passing_markers(step: Callable[[Any, Any], tuple[Any, Iterable[Any]]]) -> Callable[..., Any]:
    def marker_step(state: Any, x: Any) -> tuple[Any, Iterable[Any]]:
        return (state, (x,)) if x.__class__ is Marker else step(state, x)
    return marker_step


def _keyed_end_skipping_markers(on_end: Callable[[Any, Any], Iterable[Any]] | None) -> Callable[..., Any] | None:
    if on_end is None:
        return None

    def marker_end(key: Any, state: Any) -> Iterable[Any]:
        return () if key is Marker else on_end(key, state)
    return marker_end


@dataclass(slots=True)
class _Stages:
    """Adds the SL / PS / SF stages of one pipeline; wraps their functions when markers flow."""

    markers: bool
    partitions: int = DEFAULT_PARTITIONS

    def sl(self, stream: Stream, fn: Callable[[Any], Iterable[Any]], name: str) -> Stream:
        """Stateless: ``fn(record) -> outputs`` (filter and project in one step)."""
        return stream.flat_map(_flat_map_passing_markers(fn) if self.markers else fn, name=name)

    def ps(self, stream: Stream, key: Callable[[Any], Any], step: Callable[..., Any], state: Callable[[], Any],
           name: str, on_end: Callable[[Any, Any], Iterable[Any]] | None = None,
           partitions: int | None = None) -> Stream:
        """Partitioned stateful, keyed by ``key``."""
        if self.markers:
            key, step, on_end = _key_passing_markers(key), _step_passing_markers(step), \
                _keyed_end_skipping_markers(on_end)
        return stream.key_by(key, partitions=partitions or self.partitions) \
            .process(step, state=state, on_end=on_end, name=name)

    def sf(self, stream: Stream, step: Callable[..., Any], state: Callable[[], Any], name: str,
           on_end: Callable[[Any], Iterable[Any]] | None = None) -> Stream:
        """Stateful: one ordered instance."""
        if self.markers:
            step = _step_passing_markers(step)
        return stream.process(step, state=state, kind="stateful", on_end=on_end, name=name)


# -- static tables (read once, captured by the steps) --------------------------------------------------------------


def _items_in_categories(data_dir: Path, categories: tuple[int, ...]) -> frozenset[int]:
    t = io.read_table(data_dir, "item", ("i_item_sk", "i_category_id")).to_pydict()
    wanted = set(categories)
    return frozenset(i for i, c in zip(t["i_item_sk"], t["i_category_id"]) if i is not None and c in wanted)


def _category_of_item(data_dir: Path) -> dict[int, int]:
    """item → category, for items with a category (the inner join drops the others)."""
    t = io.read_table(data_dir, "item", ("i_item_sk", "i_category_id")).to_pydict()
    return {i: c for i, c in zip(t["i_item_sk"], t["i_category_id"]) if i is not None and c is not None}


#: Q4's page classes (spec §5 Q4 step 1: "map wp_type to 3 classes").
OTHER_PAGE, CART_PAGE, CHECKOUT_PAGE = 0, 1, 2


def _page_classes(data_dir: Path, cart: str, checkout: str) -> dict[int, int]:
    t = io.read_table(data_dir, "web_page", ("wp_web_page_sk", "wp_type")).to_pydict()
    classes = {cart: CART_PAGE, checkout: CHECKOUT_PAGE}
    return {p: classes.get(kind, OTHER_PAGE) for p, kind in zip(t["wp_web_page_sk"], t["wp_type"]) if p is not None}


def _days_between(data_dir: Path, start: str, end: str) -> frozenset[int]:
    """Date keys whose ``d_date`` lies in [start, end] (yyyy-MM-dd strings compare like dates)."""
    t = io.read_table(data_dir, "date_dim", ("d_date_sk", "d_date")).to_pydict()
    return frozenset(k for k, d in zip(t["d_date_sk"], t["d_date"]) if k is not None and d is not None
                     and start <= d <= end)


# -- Q1: SS → SL → PS(ticket) → PS(pair) → SF ----------------------------------------------------------------------


def q01_select(stores: frozenset[int], items: frozenset[int], window_s: int | None) -> Callable[[dict], tuple]:
    """SL: lines of the stores and item categories, projected to (ticket, item, window_start)."""
    day = SECONDS_PER_DAY

    def select(r: dict) -> tuple:
        if r["ss_store_sk"] in stores:
            item, ticket = r["ss_item_sk"], r["ss_ticket_number"]
            # A NULL ticket never equals another in the batch self-join, so it makes no pair.
            if item in items and ticket is not None:
                if not window_s:
                    return ((ticket, item, 0),)
                try:
                    ts = r["ss_sold_date_sk"] * day + r["ss_sold_time_sk"]
                except TypeError:  # NULL time: no window, no pair (as the batch join on window_start)
                    return ()
                return ((ticket, item, ts // window_s * window_s),)
        return ()
    return select


def q01_basket_pairs(baskets: dict, line: tuple) -> tuple[dict, Iterable[tuple]]:
    """PS by ticket: on each new distinct item of the basket, the pairs (window, min, max) with the items before.

    Same pair multiset as K's set-then-pairs, with no end-of-ticket signal (§5 Q1 step 2).
    """
    _, item, window = line
    basket = baskets.get(window)
    if basket is None:
        baskets[window] = {item}
        return baskets, ()
    if item in basket:
        return baskets, ()
    pairs = [(window, a, item) if a < item else (window, item, a) for a in basket]
    basket.add(item)
    return baskets, pairs


def q01_pair_counter(threshold: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """PS by pair: count per window; a window's count is emitted (if > threshold) when the pair's window moves on.

    The input is in window order, so a pair's next window means its last one is
    closed; ``on_end`` flushes the open one.
    """
    def count(state: list, pair: tuple) -> tuple[list, Iterable[tuple]]:
        window = pair[0]
        if state[0] == window:
            state[1] += 1
            return state, ()
        closed = ((state[0], pair[1], pair[2], state[1]),) if state[1] > threshold else ()
        state[0], state[1] = window, 1
        return state, closed

    def flush(pair: tuple, state: list) -> Iterable[tuple]:
        return ((state[0], pair[0], pair[1], state[1]),) if state[1] > threshold else ()
    return count, flush


def _new_pair_count() -> list:
    return [None, 0]


def q01_top_collect(windows: dict, row: tuple) -> tuple[dict, tuple]:
    """SF: gather (window, a, b, cnt) rows by window."""
    rows = windows.get(row[0])
    if rows is None:
        windows[row[0]] = [row]
    else:
        rows.append(row)
    return windows, ()


def q01_top_emit(limit: int) -> Callable[[dict], list]:
    """SF end: per window in time order, the top ``limit`` by (cnt desc, item_sk_1, item_sk_2)."""
    def emit(windows: dict) -> list:
        out: list = []
        for window in sorted(windows):
            out.extend(heapq.nsmallest(limit, windows[window], key=lambda r: (-r[3], r[1], r[2])))
        return out
    return emit


def _q01(stages: _Stages, src: Stream, data_dir: Path, p: Q01Params) -> tuple[Stream, Callable[[list], list]]:
    items = _items_in_categories(data_dir, p.categories)
    s = stages.sl(src, q01_select(frozenset(p.stores), items, p.window_s), "select")
    s = stages.ps(s, itemgetter(0), q01_basket_pairs, dict, "basket_pairs")
    count, flush = q01_pair_counter(p.viewed_together_count)
    s = stages.ps(s, itemgetter(1, 2), count, _new_pair_count, "pair_counts", on_end=flush)
    s = stages.sf(s, q01_top_collect, dict, "top_pairs", on_end=q01_top_emit(p.limit))
    if p.window_s:
        return s, lambda rows: rows
    return s, lambda rows: [r[1:] for r in rows]


# -- Q2: WC → SL → PS(user) → SL → PS(item) → SF -------------------------------------------------------------------


def q02_select(r: dict) -> tuple:
    """SL: clicks of known users on known items, projected to (user, tstamp, item)."""
    user, item = r["wcs_user_sk"], r["wcs_item_sk"]
    if user is None or item is None:
        return ()
    # §1 tstamp, inline (a call per click costs more than the arithmetic); NULL date or time: NULL tstamp.
    try:
        ts = r["wcs_click_date_sk"] * SECONDS_PER_DAY + r["wcs_click_time_sk"]
    except TypeError:
        ts = None
    return ((user, ts, item),)


def q02_sessionizer(timeout: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """PS by user: the item set of the open session; a closed session is emitted as (user, seq, items).

    State ``[last tstamp, item set or None, session seq]``; a gap > timeout
    closes the session (a gap of exactly ``timeout`` stays, §4 Q2).
    """
    def step(state: list, click: tuple) -> tuple[list, Iterable[tuple]]:
        user, ts, item = click
        items = state[1]
        closed: tuple = ()
        if items is None:
            state[1], state[2] = {item}, 1
        # A new session when the gap is > timeout, or after a NULL tstamp (the batch rule: lag is NULL).
        elif (last := state[0]) is None or (ts is not None and ts - last > timeout):
            closed = ((user, state[2], items),)
            state[1], state[2] = {item}, state[2] + 1
        else:
            items.add(item)
        state[0] = ts
        return state, closed

    def flush(user: int, state: list) -> Iterable[tuple]:
        return ((user, state[2], state[1]),) if state[1] is not None else ()
    return step, flush


def _new_session() -> list:
    return [None, None, 0]


def q02_co_viewed(item_sk: int) -> Callable[[tuple], Iterable[tuple]]:
    """SL (K form, §5 Q2 step 3): for a session holding ``item_sk``, one (other item, item_sk) per other item."""
    def pairs(session: tuple) -> Iterable[tuple]:
        items = session[2]
        if item_sk not in items:
            return ()
        return [(other, item_sk) for other in items if other != item_sk]
    return pairs


def count_by_key(n: int, pair: tuple) -> tuple[int, tuple]:
    """PS: running count of the key, emitted as (*pair, count)."""
    n += 1
    return n, ((pair[0], pair[1], n),)


def q02_top_collect(counts: dict, row: tuple) -> tuple[dict, tuple]:
    """SF: the latest running count of every (item_sk_1, item_sk_2)."""
    counts[row[0], row[1]] = row[2]
    return counts, ()


def q02_top_emit(limit: int) -> Callable[[dict], list]:
    """SF end: the global top ``limit`` by (cnt desc, item_sk_1)."""
    def emit(counts: dict) -> list:
        top = heapq.nsmallest(limit, counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
        return [(a, b, n) for (a, b), n in top]
    return emit


def _q02(stages: _Stages, src: Stream, data_dir: Path, p: Q02Params) -> tuple[Stream, Callable[[list], list]]:
    s = stages.sl(src, q02_select, "select")
    step, flush = q02_sessionizer(p.session_timeout_s)
    s = stages.ps(s, itemgetter(0), step, _new_session, "sessions", on_end=flush)
    s = stages.sl(s, q02_co_viewed(p.item_sk), "co_viewed")
    s = stages.ps(s, itemgetter(0), count_by_key, int, "item_counts")
    s = stages.sf(s, q02_top_collect, dict, "top_items", on_end=q02_top_emit(p.limit))
    return s, lambda rows: rows


# -- Q3: WC → SL → PS(user) → PS(viewed item) ----------------------------------------------------------------------


def q03_select(r: dict) -> tuple:
    """SL: clicks of known users on known items, projected to (user, tstamp, item, sales); no category filter."""
    user, item = r["wcs_user_sk"], r["wcs_item_sk"]
    if user is None or item is None:
        return ()
    try:
        ts = r["wcs_click_date_sk"] * SECONDS_PER_DAY + r["wcs_click_time_sk"]
    except TypeError:
        ts = None
    return ((user, ts, item, r["wcs_sales_sk"]),)


def q03_last_viewed(purchased: frozenset[int], categories_items: frozenset[int],
                    window_s: int) -> Callable[..., Any]:
    """PS by user: the last N clicks; a purchase of a watched item emits (purchased, viewed) per recent click.

    The buffer holds every click (purchases too) and the current click enters
    it after the emission (§4 Q3 "Scan"); only viewed items of the categories
    are emitted (the category check of §5 Q3, done here).
    """
    def step(last: deque, click: tuple) -> tuple[deque, Iterable[tuple]]:
        _, ts, item, sales = click
        out: Any = ()
        if sales is not None and item in purchased and last and ts is not None:
            since = ts - window_s
            out = [(item, viewed) for viewed, seen in last
                   if viewed in categories_items and seen is not None and seen >= since]
        last.append((item, ts))
        return last, out
    return step


def q03_view_counts(counts: dict, pair: tuple) -> tuple[dict, tuple]:
    """PS by viewed item: running count per purchased item, emitted as (purchased, viewed, count)."""
    n = counts.get(pair[0], 0) + 1
    counts[pair[0]] = n
    return counts, ((pair[0], pair[1], n),)


def q03_top(limit: int) -> Callable[[list], list]:
    """The sink's top-k (§5 Q3 has no SF): the final count per pair, ordered (cnt desc, purchased, viewed)."""
    def top(rows: list) -> list:
        final: dict = {}
        for purchased, viewed, n in rows:
            key = (purchased, viewed)
            if final.get(key, 0) < n:  # counts only grow; max keeps this independent of arrival order
                final[key] = n
        best = heapq.nsmallest(limit, final.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(a, b, n) for (a, b), n in best]
    return top


def _q03(stages: _Stages, src: Stream, data_dir: Path, p: Q03Params) -> tuple[Stream, Callable[[list], list]]:
    viewed_ok = _items_in_categories(data_dir, p.categories)
    s = stages.sl(src, q03_select, "select")
    step = q03_last_viewed(frozenset(p.purchased_items), viewed_ok, p.days_in_sec_before_purchase)
    s = stages.ps(s, itemgetter(0), step, partial(deque, maxlen=p.views_before_purchase), "last_viewed")
    s = stages.ps(s, itemgetter(1), q03_view_counts, dict, "view_counts")
    return s, q03_top(p.limit)


# -- Q4: WC → SL → PS(user) → SL → SF ------------------------------------------------------------------------------


def q04_select(page_class: dict[int, int]) -> Callable[[dict], tuple]:
    """SL: non-purchase clicks of known users on known pages, projected to (user, tstamp, page class)."""
    def select(r: dict) -> tuple:
        if r["wcs_sales_sk"] is not None:
            return ()
        user, cls = r["wcs_user_sk"], page_class.get(r["wcs_web_page_sk"])
        if user is None or cls is None:  # unknown or NULL page: dropped by the inner join
            return ()
        try:
            ts = r["wcs_click_date_sk"] * SECONDS_PER_DAY + r["wcs_click_time_sk"]
        except TypeError:
            ts = None
        return ((user, ts, cls),)
    return select


def _q04_closed(state: list) -> tuple[int, bool]:
    # The order-free rule of §4 Q4: a cart click, and no checkout or a strictly later last cart.
    cart, checkout = state[2], state[3]
    return state[1], cart is not None and (checkout is None or cart > checkout)


def q04_sessionizer(timeout: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """PS by user: per session the click count and the last cart / checkout tstamps; emits (pages, abandoned).

    State ``[last tstamp, clicks, last cart tstamp, last checkout tstamp]``.
    Clicks arrive in tstamp order, so the latest tstamp of a class is its max.
    """
    def step(state: list, click: tuple) -> tuple[list, Iterable[tuple]]:
        _, ts, cls = click
        closed: tuple = ()
        if state[1] and ((last := state[0]) is None or (ts is not None and ts - last > timeout)):
            closed = (_q04_closed(state),)
            state[1], state[2], state[3] = 0, None, None
        state[1] += 1
        if cls and ts is not None:
            state[cls + 1] = ts  # CART_PAGE → index 2, CHECKOUT_PAGE → index 3
        state[0] = ts
        return state, closed

    def flush(user: int, state: list) -> Iterable[tuple]:
        return (_q04_closed(state),) if state[1] else ()
    return step, flush


def _new_cart_session() -> list:
    return [None, 0, None, None]


def q04_abandoned_pages(session: tuple) -> tuple:
    """SL: the page count of an abandoned session."""
    return (session[0],) if session[1] else ()


def q04_add(totals: list, pages: int) -> tuple[list, tuple]:
    """SF: running sum of pages and count of abandoned sessions."""
    totals[0] += pages
    totals[1] += 1
    return totals, ()


def _new_totals() -> list:
    return [0, 0]


def q04_emit(totals: list) -> list:
    """SF end: (sum of pages, sessions)."""
    return [tuple(totals)]


def q04_average(rows: list) -> list:
    """The §4 answer: sum / count, NULL without abandoned sessions (as the batch average)."""
    pages, sessions = rows[-1] if rows else (0, 0)
    return [(pages / sessions if sessions else None,)]


def _q04(stages: _Stages, src: Stream, data_dir: Path, p: Q04Params) -> tuple[Stream, Callable[[list], list]]:
    classes = _page_classes(data_dir, p.cart_page_type, p.checkout_page_type)
    s = stages.sl(src, q04_select(classes), "select")
    step, flush = q04_sessionizer(p.session_timeout_s)
    s = stages.ps(s, itemgetter(0), step, _new_cart_session, "sessions", on_end=flush)
    s = stages.sl(s, q04_abandoned_pages, "abandoned")
    s = stages.sf(s, q04_add, _new_totals, "average", on_end=q04_emit)
    return s, q04_average


# -- Q15: SS → SL → SL → PS(category) ------------------------------------------------------------------------------


def q15_select(store: int, days: frozenset[int]) -> Callable[[dict], tuple]:
    """SL 1: sales of the store on the days, projected to (date_sk, item, net_paid)."""
    def select(r: dict) -> tuple:
        if r["ss_store_sk"] == store and r["ss_sold_date_sk"] in days:
            return ((r["ss_sold_date_sk"], r["ss_item_sk"], r["ss_net_paid"]),)
        return ()
    return select


def q15_categorize(category: dict[int, int]) -> Callable[[tuple], tuple]:
    """SL 2: the item's category (inner join; NULL categories dropped), projected to (cat, date_sk, net_paid)."""
    def categorize(sale: tuple) -> tuple:
        cat = category.get(sale[1])
        return () if cat is None else ((cat, sale[0], sale[2]),)
    return categorize


# Regression state per category: [day, day's y (Decimal or None), n, Σx, Σx², Σy, Σxy], Σy and Σxy in cents.
_DAY, _Y, _N, _SX, _SXX, _SY, _SXY = range(7)


def _new_regression() -> list:
    return [None, None, 0, 0, 0, 0, 0]


def _fold_day(state: list) -> None:
    """Add the finished day (x = date_sk, y = its sales) to the sums; a day with only NULL sales adds no y."""
    x, y = state[_DAY], state[_Y]
    state[_N] += 1
    state[_SX] += x
    state[_SXX] += x * x
    if y is not None:
        cents = int(y.scaleb(2))  # decimal(7,2) sums: exact integers in cents
        state[_SY] += cents
        state[_SXY] += x * cents


def q15_regress(state: list, sale: tuple) -> tuple[list, tuple]:
    """PS by category: the day's sum; when the day changes (date-ordered input) fold it into the sums."""
    _, x, y = sale
    if state[_DAY] != x:
        if state[_DAY] is not None:
            _fold_day(state)
        state[_DAY], state[_Y] = x, y
    elif y is not None:
        state[_Y] = y if state[_Y] is None else state[_Y] + y
    return state, ()


def q15_fit(cat: int, state: list) -> tuple:
    """PS end: fold the last day, fit y = slope·x + intercept, emit (cat, slope, intercept) when slope <= 0.

    Exact integer sums, then one float64 step per value in the batch
    reference's order of operations, so both engines round alike.
    """
    _fold_day(state)
    n, sx, sxx, sy, sxy = state[_N], state[_SX], state[_SXX], state[_SY], state[_SXY]
    denominator = n * sxx - sx * sx
    if denominator == 0:  # one point: no slope (NULL in SQL), not kept
        return ()
    slope = ((n * sxy - sx * sy) / 100) / float(denominator)
    if not slope <= 0:
        return ()
    return ((cat, slope, (sy / 100 - slope * float(sx)) / n),)


def _q15(stages: _Stages, src: Stream, data_dir: Path, p: Q15Params) -> tuple[Stream, Callable[[list], list]]:
    days = _days_between(data_dir, p.start_date, p.end_date)
    s = stages.sl(src, q15_select(p.store_sk, days), "select")
    s = stages.sl(s, q15_categorize(_category_of_item(data_dir)), "categorize")
    s = stages.ps(s, itemgetter(0), q15_regress, _new_regression, "regression", on_end=q15_fit,
                  partitions=CATEGORY_PARTITIONS)
    return s, lambda rows: sorted(rows, key=itemgetter(0))  # "the sink sorts by cat" (§5 Q15)


_BUILDERS: dict[str, Callable[..., tuple[Stream, Callable[[list], list]]]] = {
    "q01": _q01, "q02": _q02, "q03": _q03, "q04": _q04, "q15": _q15}


# -- the public entry point ----------------------------------------------------------------------------------------


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
    stages = _Stages(markers=bool(marker_every), partitions=partitions)
    end, rows_of_answer = _BUILDERS[query](stages, flow.source(source, name=SOURCE_NAME), data_dir, params)
    end.sink(MarkerCollect() if marker_every else Collect(), name=SINK_NAME)

    schema = answer_schema(query, windowed=query == "q01" and bool(params.window_s))
    return QueryFlow(query=query, flow=flow, source_name=SOURCE_NAME, stream_name=stream_name, stream_files=files,
                     columns=columns, sink_name=SINK_NAME, marker_every=marker_every,
                     finish=partial(_finish, schema, rows_of_answer))


def _finish(schema: pa.Schema, rows_of_answer: Callable[[list], list], outputs: list) -> pa.Table:
    rows = rows_of_answer(_without_markers(outputs))
    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    return pa.table([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)
