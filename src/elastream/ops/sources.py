"""In-memory sources: iterables and generator functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from elastream.operators.base import Operator, SourceOperator


class FromIterable(SourceOperator):
    """Emit the items of an iterable, in order, in batches.

    Example::

        flow.add(es.ops.FromIterable(range(1000)), name="numbers")
    """

    def __init__(self, iterable: Iterable[Any]):
        super().__init__(outputs=1)
        self.iterable = iterable
        self._it: Any = None

    def open(self, ctx) -> None:
        self._it = iter(self.iterable)

    def next_batch(self, max_items: int) -> list | None:
        items = list(islice(self._it, max_items))
        return items if items else None

    def describe(self) -> str:
        return f"FromIterable({type(self.iterable).__name__})"


class FromGenerator(FromIterable):
    """Emit what a zero-argument generator function yields (called once per run)."""

    def __init__(self, fn: Callable[[], Iterable[Any]]):
        super().__init__(())
        self.fn = fn

    def open(self, ctx) -> None:
        self._it = iter(self.fn())


class RateLimited(Operator):
    """Emit items of an iterable at a fixed rate (tuples per second) without holding a thread.

    ``stamp=True`` emits ``(perf_counter_at_emit, item)`` pairs, for end-to-end
    latency measurements.
    """

    def __init__(self, iterable: Iterable[Any], rate: float, stamp: bool = False):
        super().__init__(inputs=0, outputs=1)
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.iterable = iterable
        self.rate = float(rate)
        self.stamp = stamp

    async def process(self, ctx) -> None:
        out = ctx.outputs[0]
        period = 1.0 / self.rate
        due = ctx.now
        for item in self.iterable:
            if ctx.shutdown_requested:
                break
            await ctx.sleep_until(due)
            # The tuple's clock time is when it was due: late pushes (an overloaded flow) count as latency.
            await out.push((ctx.now, item) if self.stamp else item, clock_time=due)
            due += period
