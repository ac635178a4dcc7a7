"""Q3, the last items viewed before a purchase of a given item (spec §4 Q3, §5).

WC → SL → PS(user) → PS(viewed item): SL keeps clicks of known users on known
items; PS by user keeps each user's last N clicks and, at a purchase of the
item, emits the recent viewed items of the categories; PS by viewed item
counts them; the top pairs are picked from the sink's rows (§5 Q3 has no SF).

Threading: the step functions run in whichever worker runs their stage; keyed
state belongs to one key and is touched by one worker at a time.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

from elastream.graph.fluent import Stream
from elastream.tpcxbb.params import Q03Params
from elastream.tpcxbb.pipelines.stages import Stages, items_in_categories
from elastream.tpcxbb.schema import SECONDS_PER_DAY


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


def build(stages: Stages, src: Stream, data_dir: Path, p: Q03Params) -> tuple[Stream, Callable[[list], list]]:
    """The Q3 chain (§5: WC → SL → PS(user) → PS(viewed item)) on ``src``: its last stream, and the function from the sink's rows to the answer rows."""
    viewed_ok = items_in_categories(data_dir, p.categories)
    s = stages.sl(src, q03_select, "select")
    step = q03_last_viewed(frozenset(p.purchased_items), viewed_ok, p.days_in_sec_before_purchase)
    s = stages.ps(s, itemgetter(0), step, partial(deque, maxlen=p.views_before_purchase), "last_viewed")
    s = stages.ps(s, itemgetter(1), q03_view_counts, dict, "view_counts")
    return s, q03_top(p.limit)
