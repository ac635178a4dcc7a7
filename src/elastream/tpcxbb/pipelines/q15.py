"""Q15, categories with flat or declining sales in a store (spec §4 Q15, §5): SS → SL → SL → PS(category).

SL keeps the store's sales on the days; SL adds the item's category; PS by
category sums each day and fits a least-squares line over the days at the end
(exact integer sums in cents, then the batch reference's float steps).

Threading: the step functions run in whichever worker runs their stage; keyed
state belongs to one key and is touched by one worker at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from pathlib import Path

from elastream.graph.fluent import Stream
from elastream.tpcxbb import io
from elastream.tpcxbb.params import Q15Params
from elastream.tpcxbb.pipelines.stages import CATEGORY_PARTITIONS, Stages


def _category_of_item(data_dir: Path) -> dict[int, int]:
    """item → category, for items with a category (the inner join drops the others)."""
    t = io.read_table(data_dir, "item", ("i_item_sk", "i_category_id")).to_pydict()
    return {i: c for i, c in zip(t["i_item_sk"], t["i_category_id"]) if i is not None and c is not None}


def _days_between(data_dir: Path, start: str, end: str) -> frozenset[int]:
    """Date keys whose ``d_date`` lies in [start, end] (yyyy-MM-dd strings compare like dates)."""
    t = io.read_table(data_dir, "date_dim", ("d_date_sk", "d_date")).to_pydict()
    return frozenset(k for k, d in zip(t["d_date_sk"], t["d_date"]) if k is not None and d is not None
                     and start <= d <= end)


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


def build(stages: Stages, src: Stream, data_dir: Path, p: Q15Params) -> tuple[Stream, Callable[[list], list]]:
    """The Q15 chain (§5: SS → SL → SL → PS(category)) on ``src``: its last stream, and the function from the sink's rows to the answer rows."""
    days = _days_between(data_dir, p.start_date, p.end_date)
    s = stages.sl(src, q15_select(p.store_sk, days), "select")
    s = stages.sl(s, q15_categorize(_category_of_item(data_dir)), "categorize")
    s = stages.ps(s, itemgetter(0), q15_regress, _new_regression, "regression", on_end=q15_fit,
                  partitions=CATEGORY_PARTITIONS)
    return s, lambda rows: sorted(rows, key=itemgetter(0))  # "the sink sorts by cat" (§5 Q15)
