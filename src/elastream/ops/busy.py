"""Busy: the C-Stream §5 benchmark operator (cost per tuple, selectivity).

``gil="hold"`` spins in pure Python (threads cannot overlap it);
``gil="release"`` does calibrated work in C code that releases the GIL
(hashing a buffer with hashlib), so threads run it in parallel.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from time import perf_counter, thread_time
from typing import Any

from elastream.operators.base import STATELESS, FunctionOperator

_CALIBRATION: dict[int, float] = {}
_HASH_BLOCK = 1 << 16  # hashlib releases the GIL for inputs above 2047 bytes


def hash_bytes_per_second() -> float:
    """Measured sha256 throughput of this machine (bytes/s), cached per process."""
    if _HASH_BLOCK not in _CALIBRATION:
        buf = b"\x00" * _HASH_BLOCK
        best = 0.0
        for _ in range(5):
            t0 = perf_counter()
            for _ in range(20):
                hashlib.sha256(buf).digest()
            dt = perf_counter() - t0
            best = max(best, 20 * _HASH_BLOCK / dt)
        _CALIBRATION[_HASH_BLOCK] = best
    return _CALIBRATION[_HASH_BLOCK]


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time in pure Python (holds the GIL).

    Measured with the thread's CPU clock, not the wall clock: a thread waiting
    for the GIL accrues no CPU time, so threads cannot fake parallel speed-up.
    """
    end = thread_time() + seconds
    while thread_time() < end:
        pass


@lru_cache(maxsize=16)
def shared_block(size: int) -> bytes:
    """``size`` bytes to hash, one object for every Busy of that cost (bytes are immutable, so threads share it).

    A flow of 1,000 GIL-releasing Busy operators of a few ms each would otherwise hold 1,000 blocks of
    megabytes (3 GB at 2 ms a tuple) and spend its first seconds writing them.
    """
    return b"\x01" * size


class Busy(FunctionOperator):
    """Spend ``cost_us`` microseconds per tuple, forward it with probability ``selectivity``.

    Selectivity above 1 emits ``floor(s)`` copies plus one more with probability
    ``s - floor(s)``. The random stream is seeded, so runs are reproducible.
    """

    kind = STATELESS

    def __init__(self, cost_us: float = 100.0, selectivity: float = 1.0, gil: str = "hold", seed: int = 0):
        super().__init__(inputs=1, outputs=1)
        if gil not in ("hold", "release"):
            raise ValueError("gil must be 'hold' or 'release'")
        if cost_us < 0 or selectivity < 0:
            raise ValueError("cost_us and selectivity must be >= 0")
        self.cost_us = cost_us
        self.selectivity = selectivity
        self.gil = gil
        self.seed = seed
        self._rng = random.Random(seed)
        self._block = b""
        self._hash_bytes = 0

    def open(self, ctx) -> None:
        self._rng = random.Random(self.seed)
        if self.gil == "release":
            self._hash_bytes = max(2048, int(hash_bytes_per_second() * self.cost_us * 1e-6))
            self._block = shared_block(self._hash_bytes)

    def _work(self, n: int) -> None:
        if self.cost_us <= 0:
            return
        if self.gil == "hold":
            spin(n * self.cost_us * 1e-6)
        else:
            block = self._block
            for _ in range(n):
                hashlib.sha256(block).digest()

    def on_batch(self, items: list, port: int) -> list[Any]:
        self._work(len(items))
        s = self.selectivity
        if s == 1.0:
            return items
        whole, frac = int(s), s - int(s)
        rnd = self._rng.random
        out = []
        for x in items:
            k = whole + (1 if frac and rnd() < frac else 0)
            out.extend([x] * k)
        return out

    def describe(self) -> str:
        return f"Busy({self.cost_us}us, s={self.selectivity}, gil={self.gil})"
