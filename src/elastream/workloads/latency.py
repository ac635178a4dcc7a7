"""The latency pipeline: fixed-rate source → parse → running count per key → format → sink.

``es.ops.RateLimited(lines, rate, stamp=True)`` emits ``(t_emit, line)`` at a
fixed rate; the emit stamp travels with the tuple through every stage and the
:class:`~elastream.workloads.measure.LatencySink` records ``now - t_emit``.
All stage functions are pure Python (they hold the GIL).

Example::

    flow, sink = build_latency_flow(rate=1000, seconds=2)
    samples = es.Runner().run(flow).outputs[sink]
"""

from __future__ import annotations

from collections.abc import Iterator

from elastream.graph.flow import Flow
from elastream.ops import RateLimited
from elastream.workloads.measure import LatencySink

KEYS = 100
SINK = "sink"

Event = tuple[float, int, int]  # (t_emit, seq, value)


def raw_lines(n: int) -> Iterator[str]:
    """``n`` CSV-like records ``"seq,value"`` with a deterministic spread of values."""
    for seq in range(n):
        yield f"{seq},{(seq * 7919) % 100_003}"


def parse(stamped: tuple[float, str]) -> Event:
    """``(t_emit, "seq,value")`` → ``(t_emit, seq, value)``."""
    t, line = stamped
    seq, value = line.split(",")
    return t, int(seq), int(value)


def key_of(event: Event) -> int:
    """Partition key: ``value % 100``."""
    return event[2] % KEYS


def count_step(count: int, event: Event) -> tuple[int, list[tuple[float, int, int]]]:
    """Running count per key: emit ``(t_emit, key, count)``."""
    count += 1
    return count, [(event[0], key_of(event), count)]


def render(counted: tuple[float, int, int]) -> tuple[float, str]:
    """Format a count as text, keeping the emit stamp first for the sink."""
    t, key, count = counted
    return t, f"key={key:02d} count={count}"


def build_latency_flow(*, rate: float, seconds: float) -> tuple[Flow, str]:
    """The latency pipeline emitting ``rate * seconds`` records at ``rate``/s; returns (flow, sink name)."""
    n = max(1, int(rate * seconds))
    flow = Flow("latency")
    (flow.source(RateLimited(raw_lines(n), rate, stamp=True), name="source")
         .map(parse, name="parse")
         .key_by(key_of).process(count_step, state=int, name="count")
         .map(render, name="format")
         .sink(LatencySink(stamp_index=0), name=SINK))
    return flow, SINK
