"""Haren §7.1's synthetic queries for ``elastream bench haren``: paced sources, Busy chains, latency sinks.

* :class:`PacedSource` emits ``(scheduled time, seq)`` tuples at a rate, optionally in bursts (on/off);
  a tuple carries the time it was *due*, so the latency a sink measures includes the time a late
  source spent behind an overloaded system (Haren §2's clock time of a data source running apart
  from the engine);
* :func:`add_query` builds one query: the source, a chain of ``L`` Busy operators (query selectivity
  uniform in [0.01, 1], per operator ``e^(log s / L)`` ± 10 %; cost class z in 0..4, per operator
  ``B·2^z`` ± 10 %), and a :class:`LatencySink`;
* the Busy operators release the GIL (``gil="release"``: they hash buffers), so two workers can run
  two of them in parallel, as Haren's processing threads do.

Threading: the operators run on the engine's workers; a sink's statistics are read after the run.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import elastream as es
from elastream.ops.busy import Busy

#: Operators per query chain (§7.2: L = 12).
CHAIN_LENGTH = 12
#: Width of a latency sink's time buckets (s): the series that shows whether max latency is flat.
BUCKET_S = 1.0


class PacedSource(es.Operator):
    """``rate`` tuples per second for ``seconds``; with ``burst=(on_s, off_s)`` only during the on phases.

    Each tuple is ``(due time, seq)`` on the run's clock (``perf_counter``). Due tuples go out in
    pushes of at most ``chunk``; between them the source sleeps until the next is due.
    """

    def __init__(self, rate: float, seconds: float, burst: tuple[float, float] | None = None, chunk: int = 10):
        super().__init__(inputs=0, outputs=1)
        if rate <= 0 or seconds <= 0:
            raise ValueError("rate and seconds must be > 0")
        self.rate, self.seconds, self.burst, self.chunk = float(rate), float(seconds), burst, chunk

    def _next_due(self, t: float, start: float) -> float:
        """The due time after ``t``: one period on, skipping an off phase."""
        t += 1.0 / self.rate
        if self.burst is None:
            return t
        on, off = self.burst
        phase = (t - start) % (on + off)
        return t if phase < on else t + (on + off - phase)

    async def process(self, ctx) -> None:
        out = ctx.outputs[0]
        start = ctx.now
        end = start + self.seconds
        due, seq = start, 0
        while due < end and not ctx.shutdown_requested:
            now = ctx.now
            if due > now:
                await ctx.sleep_until(due)
                continue
            batch = []
            while due <= now and due < end and len(batch) < self.chunk:
                batch.append((due, seq))
                seq += 1
                due = self._next_due(due, start)
            await out.push_many(batch, clock_time=batch[0][0])  # the chunk's clock time: its earliest due


class LatencySink(es.FunctionOperator):
    """Counts tuples and their latency (now − due time): total, and per :data:`BUCKET_S` bucket of arrival."""

    kind = "sink"

    def __init__(self, origin: float = 0.0):
        super().__init__(inputs=1, outputs=0)
        self.origin = origin
        self.count, self.total_s, self.max_s = 0, 0.0, 0.0
        self.buckets: dict[int, list[float]] = {}

    def open(self, ctx) -> None:
        self.count, self.total_s, self.max_s = 0, 0.0, 0.0
        self.buckets = {}

    def on_batch(self, items: list, port: int) -> None:
        now = perf_counter()
        bucket = self.buckets.setdefault(int((now - self.origin) // BUCKET_S), [0, 0.0, 0.0])
        for due, _ in items:
            latency = now - due
            self.total_s += latency
            bucket[1] += latency
            if latency > bucket[2]:
                bucket[2] = latency
        self.count += len(items)
        bucket[0] += len(items)
        self.max_s = max(self.max_s, bucket[2])

    def result(self) -> dict[str, Any]:
        return {"count": self.count, "total_s": self.total_s, "max_s": self.max_s,
                "buckets": {k: list(v) for k, v in sorted(self.buckets.items())}}


@dataclass(frozen=True, slots=True)
class QuerySpec:
    """One synthetic query: its name, class, source rate and burst, and its operators' costs and selectivities."""

    name: str
    priority: str
    rate: float
    burst: tuple[float, float] | None
    costs_us: tuple[float, ...]
    selectivities: tuple[float, ...]

    @property
    def selectivity(self) -> float:
        return math.prod(self.selectivities)


def draw_query(name: str, rng: random.Random, base_us: float, rate: float, priority: str = "low",
               burst: tuple[float, float] | None = None, length: int = CHAIN_LENGTH) -> QuerySpec:
    """A query of §7.1: selectivity s ~ U[0.01, 1] split evenly (± 10 %), cost B·2^z (z in 0..4) ± 10 %."""
    s = rng.uniform(0.01, 1.0)
    per_op = math.exp(math.log(s) / length)
    cost = base_us * 2 ** rng.randint(0, 4)
    sels = tuple(per_op * rng.uniform(0.9, 1.1) for _ in range(length))
    costs = tuple(cost * rng.uniform(0.9, 1.1) for _ in range(length))
    return QuerySpec(name, priority, rate, burst, costs, sels)


def add_query(flow: es.Flow, q: QuerySpec, seconds: float, origin: float, seed: int) -> str:
    """Add query ``q`` to ``flow`` (tagged with its name and class); returns its sink's name."""
    stream = flow.source(PacedSource(q.rate, seconds, q.burst), name=f"{q.name}.src", query=q.name,
                         priority=q.priority)
    for k, (cost, sel) in enumerate(zip(q.costs_us, q.selectivities)):
        stream = stream.then(Busy(cost, sel, gil="release", seed=seed * 100 + k), name=f"{q.name}.op{k}")
    sink = f"{q.name}.sink"
    stream.sink(LatencySink(origin), name=sink)
    return sink


def build_flow(queries: list[QuerySpec], seconds: float, origin: float, seed: int = 0) -> es.Flow:
    """One flow holding every query (each a connected component, tagged with its name and class)."""
    flow = es.Flow("haren-synthetic")
    for i, q in enumerate(queries):
        add_query(flow, q, seconds, origin, seed + i)
    return flow
