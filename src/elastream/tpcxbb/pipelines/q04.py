"""Q4, abandoned shopping carts (spec §4 Q4, §5): WC → SL → PS(user) → SL → SF.

SL keeps non-purchase clicks of known users on known pages, classed as cart,
checkout or other; PS by user sessionizes and emits (pages, abandoned) per
session; SL keeps the abandoned sessions' page counts; SF averages them.

Threading: the step functions run in whichever worker runs their stage; keyed
state belongs to one key and is touched by one worker at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from pathlib import Path
from typing import Any

from elastream.graph.fluent import Stream
from elastream.tpcxbb import io
from elastream.tpcxbb.params import Q04Params
from elastream.tpcxbb.pipelines.stages import Stages
from elastream.tpcxbb.schema import SECONDS_PER_DAY

#: Q4's page classes (spec §5 Q4 step 1: "map wp_type to 3 classes").
OTHER_PAGE, CART_PAGE, CHECKOUT_PAGE = 0, 1, 2


def _page_classes(data_dir: Path, cart: str, checkout: str) -> dict[int, int]:
    """web page → page class (a static table, read once); pages without a key are dropped."""
    t = io.read_table(data_dir, "web_page", ("wp_web_page_sk", "wp_type")).to_pydict()
    classes = {cart: CART_PAGE, checkout: CHECKOUT_PAGE}
    return {p: classes.get(kind, OTHER_PAGE) for p, kind in zip(t["wp_web_page_sk"], t["wp_type"]) if p is not None}


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


def build(stages: Stages, src: Stream, data_dir: Path, p: Q04Params) -> tuple[Stream, Callable[[list], list]]:
    """The Q4 chain (§5: WC → SL → PS(user) → SL → SF) on ``src``: its last stream, and the function from the sink's rows to the answer rows."""
    classes = _page_classes(data_dir, p.cart_page_type, p.checkout_page_type)
    s = stages.sl(src, q04_select(classes), "select")
    step, flush = q04_sessionizer(p.session_timeout_s)
    s = stages.ps(s, itemgetter(0), step, _new_cart_session, "sessions", on_end=flush)
    s = stages.sl(s, q04_abandoned_pages, "abandoned")
    s = stages.sf(s, q04_add, _new_totals, "average", on_end=q04_emit)
    return s, q04_average
