"""Q2, products viewed together with a given product in a click session (spec §4 Q2, §5).

WC → SL → PS(user) → SL → PS(item) → SF: SL keeps clicks of known users on
known items; PS by user sessionizes (a gap > timeout closes a session); SL
emits the other items of each session holding the product; PS by item counts
them; SF keeps the top items.

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
from elastream.tpcxbb.params import Q02Params
from elastream.tpcxbb.pipelines.stages import Stages
from elastream.tpcxbb.schema import SECONDS_PER_DAY


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


def build(stages: Stages, src: Stream, data_dir: Path, p: Q02Params) -> tuple[Stream, Callable[[list], list]]:
    """The Q2 chain (§5: WC → SL → PS(user) → SL → PS(item) → SF) on ``src``: its last stream, and the function from the sink's rows to the answer rows."""
    s = stages.sl(src, q02_select, "select")
    step, flush = q02_sessionizer(p.session_timeout_s)
    s = stages.ps(s, itemgetter(0), step, _new_session, "sessions", on_end=flush)
    s = stages.sl(s, q02_co_viewed(p.item_sk), "co_viewed")
    s = stages.ps(s, itemgetter(0), count_by_key, int, "item_counts")
    s = stages.sf(s, q02_top_collect, dict, "top_items", on_end=q02_top_emit(p.limit))
    return s, lambda rows: rows
