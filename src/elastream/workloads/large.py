"""IBM Streams' 1,000-operator graphs (ibm-streams-elastic-scheduler §5): pipeline, data parallel, mixed.

Every graph is one :class:`~elastream.workloads.measure.StampedSource`, a grid of
``es.ops.Busy`` operators ``width`` wide and ``depth`` deep, and one sink
(a :class:`~elastream.workloads.measure.LatencySink` unless the caller gives
another):

* :func:`pipeline` — ``n`` Busy operators in a chain (width 1, §5.1);
* :func:`data_parallel` — the source's stream dealt round-robin over ``n``
  Busy operators whose outputs a Union merges (depth 1, §5.2);
* :func:`mixed` — the same split over ``width`` chains of ``depth`` Busy
  operators each (§5.3: width 10, depth 100).

The paper counts a tuple's cost in floating-point operations (1, 100, 1,000);
:func:`flops_cost_us` turns a count into the time those operations take in
this process's pure Python, the ``cost_us`` a Busy spends per tuple, so cost 1
stays negligible beside the runtime's own per-tuple work, as in the paper.
With ``gil="release"`` Busy hashes a buffer instead, whose smallest size
(2 KiB) costs more than a few operations: its floor, not the count's.

Building a flow starts nothing; run it with any ``es.Runner``. Turn fusion off
(``es.SchedulingConfig(fuse=False)``) to have the scheduler see every operator.

Example::

    flow, sink = pipeline(1000, n_tuples=10_000, flops=100)
    result = es.Runner(threads=2, scheduling=es.SchedulingConfig(fuse=False)).run(flow)
    samples = result.outputs[sink]          # LatencySamples: one latency per tuple
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from elastream.graph.flow import Flow, OperatorHandle
from elastream.operators.base import Operator
from elastream.ops import Busy, Union
from elastream.workloads.measure import LatencySink, StampedSource
from elastream.workloads.topologies import RoundRobinSplit

SINK = "sink"
#: The paper's per-tuple costs (floating-point operations), §5.1.
PAPER_FLOPS = (1, 100, 1000)

_SECONDS_PER_FLOP: list[float] = []


def seconds_per_flop() -> float:
    """Seconds one floating-point operation takes in this process's pure Python (measured once, cached).

    Example: ``flops_cost_us(1000)`` is ``1000 * seconds_per_flop() * 1e6``.
    """
    if not _SECONDS_PER_FLOP:
        rounds, best = 100_000, float("inf")
        for _ in range(3):
            x, t0 = 1.0, perf_counter()
            for _ in range(rounds):
                x = x * 0.999999 + 1e-6  # two operations a round
            best = min(best, (perf_counter() - t0) / (2 * rounds))
        _SECONDS_PER_FLOP.append(best)
    return _SECONDS_PER_FLOP[0]


def flops_cost_us(flops: float) -> float:
    """Microseconds ``flops`` floating-point operations take here: a Busy's ``cost_us`` for that count."""
    if flops < 0:
        raise ValueError("flops must be >= 0")
    return flops * seconds_per_flop() * 1e6


def pipeline(n: int = 1000, *, n_tuples: int | None, flops: float = 1, gil: str = "hold",
             seconds: float | None = None, sink: Operator | None = None) -> tuple[Flow, str]:
    """source → ``n`` Busy operators in a chain → sink; return the flow and the sink's name.

    Example::

        flow, sink = pipeline(1000, n_tuples=2000, flops=1, sink=es.ops.Collect())
    """
    return mixed(1, n, n_tuples=n_tuples, flops=flops, gil=gil, seconds=seconds, sink=sink, name="pipeline")


def data_parallel(n: int = 1000, *, n_tuples: int | None, flops: float = 1, gil: str = "hold",
                  seconds: float | None = None, sink: Operator | None = None) -> tuple[Flow, str]:
    """source → round-robin split → ``n`` Busy operators side by side → Union → sink.

    Example::

        flow, sink = data_parallel(1000, n_tuples=5000, flops=100)
    """
    return mixed(n, 1, n_tuples=n_tuples, flops=flops, gil=gil, seconds=seconds, sink=sink,
                 name="data-parallel")


def mixed(width: int = 10, depth: int = 100, *, n_tuples: int | None, flops: float = 1, gil: str = "hold",
          seconds: float | None = None, sink: Operator | None = None, name: str = "mixed") -> tuple[Flow, str]:
    """source → round-robin split → ``width`` chains of ``depth`` Busy operators → Union → sink.

    Width 1 has no split or Union (a plain pipeline). The Busy operators are named
    ``busy_<chain>_<stage>``; the split ``split``, the Union ``merge``. The source
    emits ``(seq, t_created)`` with seq 0, 1, ... ``n_tuples - 1`` (or stops after
    ``seconds``); every Busy forwards each tuple once (selectivity 1).

    Example::

        flow, sink = mixed(10, 100, n_tuples=10_000, flops=1000)
    """
    if width < 1 or depth < 1:
        raise ValueError("width and depth must be >= 1")
    if n_tuples is None and seconds is None:
        raise ValueError("a large flow needs n_tuples or seconds")
    flow = Flow(name)
    cost_us = flops_cost_us(flops)
    src = flow.add(StampedSource(n_tuples, seconds=seconds), name="src")
    end = flow.add(sink if sink is not None else LatencySink(stamp_index=1), name=SINK)
    chains = [_chain(flow, branch, depth, lambda i: Busy(cost_us, 1.0, gil, seed=i)) for branch in range(width)]
    if width == 1:
        head, tail = chains[0]
        src >> head
        tail >> end
        return flow, SINK
    split = flow.add(RoundRobinSplit(width), name="split")
    merge = flow.add(Union(width), name="merge")
    src >> split
    for branch, (head, tail) in enumerate(chains):
        flow.connect(split.out(branch), head.in_(0))
        flow.connect(tail.out(0), merge.in_(branch))
    merge >> end
    return flow, SINK


def _chain(flow: Flow, branch: int, depth: int,
           make: Callable[[int], Operator]) -> tuple[OperatorHandle, OperatorHandle]:
    """``depth`` operators connected in a row; return the first and the last."""
    first = prev = flow.add(make(branch * depth), name=f"busy_{branch}_0")
    for stage in range(1, depth):
        prev = prev >> flow.add(make(branch * depth + stage), name=f"busy_{branch}_{stage}")
    return first, prev
