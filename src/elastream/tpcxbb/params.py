"""Query parameters of spec §3 (plus Q1's window of §5) as frozen dataclasses.

One class per query; the defaults are the kit's (K
``queryParameters.sql``, spec §3). Each field carries metadata: ``help`` (for
the CLI flag) and ``kit`` (the kit's parameter name, where it has one). Every
engine takes the same object, so the local, Spark batch and Spark streaming
answers are computed from identical parameters.

Immutable values; safe to share between threads and to pickle into worker
processes.

Example::

    >>> Q02Params().item_sk
    10001
    >>> default_params("q15").store_sk
    10
    >>> params_from_options("q01", {"stores": [10], "window_s": 3600}).window_s
    3600
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any


def _param(default: Any, help: str, kit: str | None = None) -> Any:  # noqa: A002 - argparse's word
    """A dataclass field with CLI help and the kit's parameter name as metadata."""
    return field(default=default, metadata={"help": help, "kit": kit})


def _check_positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


def _check_int_tuple(owner: str, **values: tuple[int, ...]) -> None:
    for name, value in values.items():
        if not isinstance(value, tuple) or not value or not all(isinstance(v, int) for v in value):
            raise ValueError(f"{owner}.{name} must be a non-empty tuple of integers, got {value!r}")


@dataclass(frozen=True, slots=True)
class Q01Params:
    """Q1, items sold together (spec §4 Q1, §5 Q1)."""

    categories: tuple[int, ...] = _param((1, 2, 3), "item categories that count", "q01_i_category_id_IN")
    stores: tuple[int, ...] = _param((10, 20, 33, 40, 50), "stores that count", "q01_ss_store_sk_IN")
    viewed_together_count: int = _param(50, "keep pairs sold together in strictly more tickets than this",
                                        "q01_viewed_together_count")
    limit: int = _param(100, "rows kept (per window when windowed)", "q01_limit")
    window_s: int | None = _param(None, "window length in seconds of event time (§5 'every hour' = 3600); "
                                        "unset: the whole stream, K's Q1")

    def __post_init__(self) -> None:
        _check_int_tuple("Q01Params", categories=self.categories, stores=self.stores)
        _check_positive("Q01Params", limit=self.limit)
        if self.viewed_together_count < 0:
            raise ValueError(f"Q01Params.viewed_together_count must be >= 0, got {self.viewed_together_count}")
        if self.window_s is not None:
            _check_positive("Q01Params", window_s=self.window_s)


@dataclass(frozen=True, slots=True)
class Q02Params:
    """Q2, products viewed together with one product in a click session (spec §4 Q2)."""

    item_sk: int = _param(10001, "the product whose co-viewed products are counted", "q02_item_sk")
    session_timeout_s: int = _param(3600, "a gap greater than this many seconds opens a new session",
                                    "q02_session_timeout_inSec")
    limit: int = _param(30, "rows kept", "q02_limit")
    max_items_per_basket: int = _param(5_000_000, "kit parameter, not used by the v1.2 query (spec §3)",
                                       "q02_MAX_ITEMS_PER_BASKET")

    def __post_init__(self) -> None:
        _check_positive("Q02Params", session_timeout_s=self.session_timeout_s, limit=self.limit,
                        max_items_per_basket=self.max_items_per_basket)


@dataclass(frozen=True, slots=True)
class Q03Params:
    """Q3, the last items viewed before a purchase of one product (spec §4 Q3)."""

    days_in_sec_before_purchase: int = _param(864_000, "look-back window in seconds before the purchase",
                                              "q03_days_in_sec_before_purchase")
    views_before_purchase: int = _param(5, "clicks kept in the per-user buffer", "q03_views_before_purchase")
    purchased_items: tuple[int, ...] = _param((10001,), "purchased products that trigger emission",
                                              "q03_purchased_item_IN")
    categories: tuple[int, ...] = _param((2, 3), "categories of the viewed item that count",
                                         "q03_purchased_item_category_IN")
    limit: int = _param(100, "rows kept (the kit's q03.sql hard-codes 100; q03_limit says 30, spec §8.1)",
                        "q03_limit")

    def __post_init__(self) -> None:
        _check_int_tuple("Q03Params", purchased_items=self.purchased_items, categories=self.categories)
        _check_positive("Q03Params", days_in_sec_before_purchase=self.days_in_sec_before_purchase,
                        views_before_purchase=self.views_before_purchase, limit=self.limit)


@dataclass(frozen=True, slots=True)
class Q04Params:
    """Q4, shopping-cart abandonment (spec §4 Q4)."""

    session_timeout_s: int = _param(3600, "a gap greater than this many seconds opens a new session",
                                    "q04_session_timeout_inSec")
    cart_page_type: str = _param("dynamic", "wp_type of the add-to-cart page (q4_abandonedShoppingCarts.py)")
    checkout_page_type: str = _param("order", "wp_type of the checkout page (q4_abandonedShoppingCarts.py)")

    def __post_init__(self) -> None:
        _check_positive("Q04Params", session_timeout_s=self.session_timeout_s)
        if not self.cart_page_type or not self.checkout_page_type:
            raise ValueError("Q04Params page types must be non-empty strings")


@dataclass(frozen=True, slots=True)
class Q15Params:
    """Q15, categories with flat or declining store sales (spec §4 Q15)."""

    start_date: str = _param("2001-09-02", "first day, yyyy-MM-dd, inclusive", "q15_startDate")
    end_date: str = _param("2002-09-02", "last day, yyyy-MM-dd, inclusive", "q15_endDate")
    store_sk: int = _param(10, "the store", "q15_store_sk")

    def __post_init__(self) -> None:
        for name in ("start_date", "end_date"):
            value = getattr(self, name)
            try:
                dt.date.fromisoformat(value)
            except (TypeError, ValueError):
                raise ValueError(f"Q15Params.{name} must be a yyyy-MM-dd date, got {value!r}") from None
        if self.start_date > self.end_date:
            raise ValueError(f"Q15Params: start_date {self.start_date} is after end_date {self.end_date}")


QueryParams = Q01Params | Q02Params | Q03Params | Q04Params | Q15Params

#: Query name → its parameter class, in the spec's order.
QUERIES: dict[str, type[Any]] = {"q01": Q01Params, "q02": Q02Params, "q03": Q03Params, "q04": Q04Params,
                                 "q15": Q15Params}


def params_class(name: str) -> type[Any]:
    """The parameter class of query ``name`` (``q01`` … ``q15``); ``KeyError`` naming the known ones."""
    try:
        return QUERIES[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(QUERIES)}") from None


def default_params(name: str) -> Any:
    """The spec §3 defaults of query ``name``."""
    return params_class(name)()


def params_from_options(name: str, options: dict[str, Any]) -> Any:
    """Defaults of query ``name`` overridden by the non-``None`` entries of ``options`` that are its fields.

    Lists become tuples. Unknown keys are ignored, so a whole argparse
    namespace can be passed.
    """
    cls = params_class(name)
    known = {f.name for f in dataclasses.fields(cls)}
    chosen = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()
              if k in known and v is not None}
    return cls(**chosen)


def params_dict(params: Any) -> dict[str, Any]:
    """A JSON-ready dict of a parameter object (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(params).items()}
