"""End-to-end latency measurement: source-stamped tuples, sink-measured latency.

A :class:`StampedSource` emits ``(seq, t_created)`` tuples, ``t_created`` being
``time.perf_counter()`` when the source made the tuple's batch; a
:class:`LatencySink` records ``perf_counter() - t_created`` for every tuple it
receives. Both are ordinary operators, so they run in whichever worker thread
the scheduler picks; their counters are read only after the run ends
(``RunResult.outputs[sink_name]`` is a :class:`LatencySamples`).

Example::

    flow = es.Flow("lat")
    flow.source(StampedSource(n_tuples=1000)).map(lambda t: t).sink(LatencySink(), name="sink")
    samples = es.Runner().run(flow).outputs["sink"]
    summarize(samples)["p99_ms"]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter, process_time, sleep
from typing import Any

from elastream.operators.base import FunctionOperator, SourceOperator


class StampedSource(SourceOperator):
    """Emit ``(seq, t_created)`` tuples as fast as back-pressure allows.

    Stops after ``n_tuples`` tuples or ``seconds`` seconds after it opened,
    whichever comes first (at least one of them must be given). ``seq`` starts
    at ``first_seq``. One clock read per batch: every tuple of a batch carries
    the instant the batch was made.
    """

    def __init__(self, n_tuples: int | None = None, *, seconds: float | None = None, first_seq: int = 0):
        super().__init__(outputs=1)
        if n_tuples is None and seconds is None:
            raise ValueError("StampedSource needs n_tuples or seconds")
        if n_tuples is not None and n_tuples < 0:
            raise ValueError("n_tuples must be >= 0")
        self.n_tuples = n_tuples
        self.seconds = seconds
        self.first_seq = first_seq
        self._next = first_seq
        self._end_seq: float = math.inf
        self._end_time: float = math.inf

    def open(self, ctx: Any) -> None:
        self._next = self.first_seq
        self._end_seq = math.inf if self.n_tuples is None else self.first_seq + self.n_tuples
        self._end_time = math.inf if self.seconds is None else perf_counter() + self.seconds

    def next_batch(self, max_items: int) -> list | None:
        now = perf_counter()
        if self._next >= self._end_seq or now >= self._end_time:
            return None
        start = self._next
        stop = int(min(start + max_items, self._end_seq))
        self._next = stop
        return [(seq, now) for seq in range(start, stop)]

    def describe(self) -> str:
        return f"StampedSource(n={self.n_tuples}, seconds={self.seconds})"


@dataclass(slots=True)
class LatencySamples:
    """What a :class:`LatencySink` measured: one latency (seconds) per tuple, in arrival order."""

    latencies_s: list[float] = field(default_factory=list)
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(arrival time, tuples) per received batch, in arrival order."""
    first_arrival: float = 0.0
    last_arrival: float = 0.0

    @property
    def count(self) -> int:
        """Tuples received."""
        return len(self.latencies_s)

    def window(self, start: float, end: float) -> LatencySamples:
        """The tuples that arrived in ``[start, end)`` (``perf_counter`` instants)."""
        out = LatencySamples()
        i = 0
        for t, n in self.arrivals:
            if start <= t < end:
                if not out.arrivals:
                    out.first_arrival = t
                out.last_arrival = t
                out.arrivals.append((t, n))
                out.latencies_s.extend(self.latencies_s[i:i + n])
            i += n
        return out


class LatencySink(FunctionOperator):
    """Record ``perf_counter() - item[stamp_index]`` for every tuple (one clock read per batch)."""

    kind = "sink"

    def __init__(self, stamp_index: int = 1):
        super().__init__(inputs=1, outputs=0)
        self.stamp_index = stamp_index
        self.samples = LatencySamples()

    def open(self, ctx: Any) -> None:
        self.samples = LatencySamples()

    def on_batch(self, items: list, port: int) -> None:
        now = perf_counter()
        s = self.samples
        if not s.latencies_s:
            s.first_arrival = now
        s.last_arrival = now
        s.arrivals.append((now, len(items)))
        i = self.stamp_index
        s.latencies_s.extend([now - t[i] for t in items])

    def result(self) -> LatencySamples:
        return self.samples


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100, nearest rank) of already sorted values; NaN when empty.

    Example: ``percentile([1, 2, 3, 4], 50) == 2``
    """
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def summarize(samples: LatencySamples) -> dict[str, float | None]:
    """Mean, p50, p99 and max latency in milliseconds (None when nothing arrived)."""
    values = sorted(samples.latencies_s)
    if not values:
        return {"mean_ms": None, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "mean_ms": 1e3 * sum(values) / len(values),
        "p50_ms": 1e3 * percentile(values, 50),
        "p99_ms": 1e3 * percentile(values, 99),
        "max_ms": 1e3 * values[-1],
    }


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured run of a flow ending in a :class:`LatencySink`."""

    tuples: int
    """Tuples that arrived at the sink inside the measurement window."""
    throughput: float
    """Tuples per second at the sink over the window."""
    latency: dict[str, float | None]
    """:func:`summarize` of the window's tuples (milliseconds)."""
    latency_trend: float | None
    """Mean latency of the window's second half over its first half (by arrival):
    near 1 in a steady state, above 1 while queues are still filling."""
    window_s: float
    elapsed_s: float
    cores_used: float
    """Process CPU seconds per wall second during the run (all threads)."""
    stopped_early: bool
    """True when the run was shut down at the end of its time budget."""


def measure_run(runner: Any, flow: Any, sink: str, *, seconds: float | None = None, warmup_s: float = 0.0,
                timeout: float | None = None) -> Measurement:
    """Run ``flow`` with ``runner`` and measure throughput and latency at ``sink``.

    Without ``seconds`` the flow runs to completion and every tuple counts.
    With ``seconds`` it is shut down after that long (if still running) and only
    tuples arriving in ``[start + warmup_s, stop)`` count, so the numbers are a
    steady state rather than a fill-up or drain phase.

    Example::

        m = measure_run(es.Runner(threads=2), flow, "sink", seconds=3, warmup_s=0.5)
        m.throughput, m.latency["p99_ms"]
    """
    cpu0, t0 = process_time(), perf_counter()
    handle = runner.start(flow)
    stopped = False
    if seconds is None:
        result = handle.wait(timeout)
        stop = perf_counter()
    else:
        stop = t0 + seconds
        while not handle.done and perf_counter() < stop:
            sleep(0.02)  # polling the run's time budget, not synchronising with it
        stopped = not handle.done
        stop = min(stop, perf_counter())
        result = handle.shutdown() if stopped else handle.wait(timeout)
    wall, cpu = perf_counter() - t0, process_time() - cpu0
    samples: LatencySamples = result.outputs[sink]
    if seconds is None:
        window, span = samples, result.elapsed_s
    else:
        start = t0 + warmup_s
        end = stop if stopped else samples.last_arrival + 1e-9
        window, span = samples.window(start, end), max(end - start, 1e-9)
    return Measurement(tuples=window.count, throughput=window.count / span if span > 0 else 0.0,
                       latency=summarize(window), latency_trend=latency_trend(window), window_s=span,
                       elapsed_s=result.elapsed_s,
                       cores_used=cpu / wall if wall > 0 else 0.0, stopped_early=stopped)


def latency_trend(samples: LatencySamples) -> float | None:
    """Mean latency of the later half of the tuples (by arrival) over the earlier half; None if < 2 tuples."""
    values = samples.latencies_s
    half = len(values) // 2
    if half == 0:
        return None
    first = sum(values[:half]) / half
    second = sum(values[half:]) / (len(values) - half)
    return second / first if first > 0 else None
