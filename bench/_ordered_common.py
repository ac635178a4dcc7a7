"""Helpers shared by the sections of ``elastream bench ordered``: per-tuple work, keys, expectations, checks.

Used from the benchmark's own thread; the closures :func:`make_work` returns
are called from any worker thread (they share nothing mutable).
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

from elastream.ops.busy import hash_bytes_per_second

#: Keys are integers in ``[0, KEY_SPACE)``.
KEY_SPACE = 1000
#: hashlib releases the GIL only for inputs above 2047 bytes; stay well above.
MIN_HASH_BYTES = 4096


def make_work(cost_us: float) -> Callable[[], None]:
    """Per-tuple work of about ``cost_us`` µs that releases the GIL (sha256 of >= 4 KB).

    Example: ``make_work(0)()`` does nothing; ``make_work(10)()`` hashes a buffer for about 10 µs.
    """
    if cost_us <= 0:
        return lambda: None
    block = b"\x01" * max(MIN_HASH_BYTES, int(hash_bytes_per_second() * cost_us * 1e-6))
    sha = hashlib.sha256
    return lambda: sha(block).digest()


def gaussian_keys(n: int, sigma: float, rng: random.Random) -> list[int]:
    """N(0, σ) clipped to [-1, 1], scaled to the key space [0, KEY_SPACE) (ordered-multicore §7.2.1).

    Example: ``set(gaussian_keys(100, 1e-9, random.Random(0))) == {500}``
    """
    keys = []
    for _ in range(n):
        x = min(1.0, max(-1.0, rng.gauss(0.0, sigma)))
        keys.append(min(KEY_SPACE - 1, int((x + 1.0) / 2.0 * KEY_SPACE)))
    return keys


def explode_key(x: int, j: int, selectivity: int) -> int:
    """Key of the ``j``-th output of input ``x`` in the Fig. 13 pipeline."""
    return (x * selectivity + j) % KEY_SPACE


def expected_pipeline(n: int, selectivity: int) -> list[tuple[int, int]]:
    """The sequential run of the Fig. 13 pipeline: (key, running count of key) per output.

    Example: ``expected_pipeline(1, 2) == [(0, 1), (1, 1)]``
    """
    counts = [0] * KEY_SPACE
    out = []
    for x in range(n):
        for j in range(selectivity):
            key = explode_key(x, j, selectivity)
            counts[key] += 1
            out.append((key, counts[key]))
    return out


def check_order(got: Sequence[Any], expected: Sequence[Any], what: str) -> None:
    """The benchmarks double as an end-to-end check: the output must equal the sequential run, in order.

    Raises RuntimeError naming the run and the first position that differs.
    """
    if len(got) == len(expected) and all(a == b for a, b in zip(got, expected)):
        return
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    have = got[first] if first < len(got) else "<end of output>"
    want = expected[first] if first < len(expected) else "<end of expectation>"
    raise RuntimeError(f"{what}: output differs from the sequential run ({len(got)} vs {len(expected)} items; "
                       f"first difference at position {first}: got {have!r}, expected {want!r})")


def progress(msg: str) -> None:
    """One progress line on stderr (stdout stays clean for ``--json``)."""
    print(f"ordered: {msg} …", file=sys.stderr, flush=True)


def best(rows: list[dict[str, Any]], field: str, *, lowest: bool = False) -> dict[str, Any]:
    """The row with the highest (or, with ``lowest``, the lowest) ``field``."""
    return (min if lowest else max)(rows, key=lambda r: r[field])
