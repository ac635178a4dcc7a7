"""Q1, items sold together (spec §4 Q1, §5): SS → SL → PS(ticket) → PS(pair) → SF.

SL keeps the lines of the stores and item categories; PS by ticket emits each
new item pair of a basket; PS by pair counts per (optional) time window; SF
keeps the top pairs of each window.

Threading: the step functions run in whichever worker runs their stage; keyed
state belongs to one key and is touched by one worker at a time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from operator import itemgetter
from pathlib import Path
from typing import Any

from elastream.graph.fluent import Stream
from elastream.tpcxbb.params import Q01Params
from elastream.tpcxbb.pipelines.stages import Stages, items_in_categories
from elastream.tpcxbb.schema import SECONDS_PER_DAY


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


def build(stages: Stages, src: Stream, data_dir: Path, p: Q01Params) -> tuple[Stream, Callable[[list], list]]:
    """The Q1 (§5: SS → SL → PS(ticket) → PS(pair) → SF) chain on ``src``: its last stream, and the function from the sink's rows to the answer rows."""
    items = items_in_categories(data_dir, p.categories)
    s = stages.sl(src, q01_select(frozenset(p.stores), items, p.window_s), "select")
    s = stages.ps(s, itemgetter(0), q01_basket_pairs, dict, "basket_pairs")
    count, flush = q01_pair_counter(p.viewed_together_count)
    s = stages.ps(s, itemgetter(1, 2), count, _new_pair_count, "pair_counts", on_end=flush)
    s = stages.sf(s, q01_top_collect, dict, "top_pairs", on_end=q01_top_emit(p.limit))
    if p.window_s:
        return s, lambda rows: rows
    return s, lambda rows: [r[1:] for r in rows]
