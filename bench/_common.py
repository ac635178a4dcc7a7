"""Helpers shared by the benchmarks: timing, best-of-N, formatting.

Used from the benchmark's own (main) thread only.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.console import Console

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Timed:
    """A measured call: its value, wall seconds and process CPU seconds (all threads)."""

    value: Any
    wall_s: float
    cpu_s: float

    @property
    def cores_used(self) -> float:
        """CPU seconds per wall second: how many cores the process kept busy on average."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def timed(fn: Callable[[], T]) -> Timed:
    """Call ``fn()`` once, measuring wall and process CPU time.

    Example: ``timed(lambda: sum(range(10))).value == 45``
    """
    c0, t0 = time.process_time(), time.perf_counter()
    value = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return Timed(value, wall, cpu)


def best_of(n: int, fn: Callable[[], T]) -> Timed:
    """The fastest (lowest wall time) of ``n`` timed calls of ``fn``."""
    return min((timed(fn) for _ in range(max(1, n))), key=lambda t: t.wall_s)


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the load average shows other processes competing for the cores)."""
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)(),
            "load_average_1min": os.getloadavg()[0]}


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table: thousands separators, '-' for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def make_console() -> Console:
    """A rich console; wider than 80 columns when output is not a terminal, so tables stay readable."""
    probe = Console()
    if probe.is_terminal or "COLUMNS" in os.environ:
        return probe
    return Console(width=140)
