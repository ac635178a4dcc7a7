"""The answer tables of the five queries (spec §4) and how two answers are compared (spec §6).

Every engine returns a ``pyarrow.Table`` with exactly the columns of
:func:`answer_schema`, rows in the spec's output order. Values are not
rounded: Q4's average and Q15's slope/intercept are float64, and
:func:`answer_difference` compares Q4 after rounding to 1 decimal and Q15
after rounding to 7 decimals (with a relative tolerance for values that sit
on a rounding boundary), as §6 prescribes. Q1–Q3 compare exactly, row by row.

Pure functions; safe from any thread.

Example::

    >>> answer_schema("q03").names
    ['purchased_item', 'lastviewed_item', 'cnt']
    >>> answer_schema("q01", windowed=True).names
    ['window_start', 'item_sk_1', 'item_sk_2', 'cnt']
"""

from __future__ import annotations

import math

import pyarrow as pa

_I64 = pa.int64()

_SCHEMAS: dict[str, pa.Schema] = {
    "q01": pa.schema([("item_sk_1", _I64), ("item_sk_2", _I64), ("cnt", _I64)]),
    "q02": pa.schema([("item_sk_1", _I64), ("item_sk_2", _I64), ("cnt", _I64)]),
    "q03": pa.schema([("purchased_item", _I64), ("lastviewed_item", _I64), ("cnt", _I64)]),
    # K stores the average as DECIMAL(20,1); we keep the float64 ratio (compare rounded, §6).
    "q04": pa.schema([("avg_pages", pa.float64())]),
    # K: decimal(15,7); float64 here, compared after rounding to 7 decimals (§4 Q15 "Numerics").
    "q15": pa.schema([("cat", pa.int32()), ("slope", pa.float64()), ("intercept", pa.float64())]),
}

#: Decimals to round to before comparing (spec §6); absent: exact comparison.
ROUNDING: dict[str, int] = {"q04": 1, "q15": 7}
REL_TOLERANCE = 1e-9


def answer_schema(name: str, *, windowed: bool = False) -> pa.Schema:
    """The output columns of query ``name``; Q1 with a window (§5) gains a leading ``window_start``.

    ``window_start`` is the first tstamp (seconds, §1) of the window.
    """
    try:
        schema = _SCHEMAS[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(_SCHEMAS)}") from None
    if windowed and name == "q01":
        return schema.insert(0, pa.field("window_start", _I64))
    return schema


def _close(a: object, b: object, digits: int | None) -> bool:
    if a is None or b is None:
        return a is b
    if digits is None or not isinstance(a, float | int) or not isinstance(b, float | int):
        return a == b
    if round(float(a), digits) == round(float(b), digits):
        return True
    return math.isclose(float(a), float(b), rel_tol=REL_TOLERANCE, abs_tol=0.5 * 10 ** -digits)


def answer_difference(name: str, expected: pa.Table, actual: pa.Table) -> str | None:
    """``None`` when two answers of query ``name`` agree (§6), else a sentence naming the first difference.

    Example: ``answer_difference("q04", t, t) is None``
    """
    if expected.column_names != actual.column_names:
        return f"{name}: columns differ: {expected.column_names} vs {actual.column_names}"
    if expected.num_rows != actual.num_rows:
        return f"{name}: {expected.num_rows} rows expected, {actual.num_rows} found"
    digits = ROUNDING.get(name)
    for i, (want, got) in enumerate(zip(expected.to_pylist(), actual.to_pylist(), strict=True)):
        for column in expected.column_names:
            if not _close(want[column], got[column], digits):
                return f"{name}: row {i} column {column!r}: expected {want[column]!r}, found {got[column]!r}"
    return None
