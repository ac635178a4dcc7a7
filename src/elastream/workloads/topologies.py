"""The C-Stream §5.1 benchmark topologies (Fig. 3): chain, data parallel, tree, reverse tree.

Every topology is built from ``es.ops.Busy`` operators (cost per tuple,
selectivity, GIL case), fed by :class:`~elastream.workloads.measure.StampedSource`
and drained into one :class:`~elastream.workloads.measure.LatencySink`, so a run
yields throughput at the sink and source-stamped, sink-measured latency.

Building a flow starts nothing; the caller runs it with any ``es.Runner``.

Example::

    flow, sink = build_topology("chain", n_tuples=10_000, cost_us=100, selectivity=1, gil="hold")
    samples = es.Runner(threads=2).run(flow).outputs[sink]
"""

from __future__ import annotations

from typing import Any

from elastream.graph.flow import Flow, OperatorHandle
from elastream.operators.base import Operator, Status
from elastream.ops import Busy, Union
from elastream.workloads.measure import LatencySink, StampedSource

TOPOLOGIES = ("chain", "data-parallel", "tree", "reverse-tree")
SINK = "sink"


class RoundRobinSplit(Operator):
    """Deal the tuples of one input round-robin over ``n`` outputs (a coroutine operator).

    Takes up to ``batch`` tuples per wake-up and pushes each output's share as
    one batch, so tuple ``j`` (counted over the whole stream) goes to output
    ``j % n``.
    """

    def __init__(self, n: int, batch: int = 256):
        if n < 1:
            raise ValueError("RoundRobinSplit needs at least one output")
        super().__init__(inputs=1, outputs=n)
        self.batch = batch

    async def process(self, ctx: Any) -> None:
        port, outs = ctx.inputs[0], ctx.outputs
        n = len(outs)
        nxt = 0  # the output the next tuple goes to
        while await ctx.wait_for_any({port: 1}) is Status.DONE:
            items = port.pop_many(self.batch)
            for k, out in enumerate(outs):
                share = items[(k - nxt) % n::n]
                if share:
                    await out.push_many(share)
            nxt = (nxt + len(items)) % n

    def describe(self) -> str:
        return f"RoundRobinSplit({self.n_outputs})"


def build_topology(kind: str, *, n_tuples: int | None, cost_us: float, selectivity: float, gil: str,
                   ops: int = 12, depth: int = 6, seconds: float | None = None) -> tuple[Flow, str]:
    """Build one C-Stream §5.1 topology; return the flow and its sink's name.

    ``n_tuples`` is the total the sources emit (split evenly over the 2**(depth-1)
    sources of a reverse tree); with ``seconds`` the sources also stop after that
    long, so ``n_tuples`` may then be None. ``ops`` is the number of Busy
    operators of ``chain`` and ``data-parallel``; trees have ``2**depth - 1``.

    Example::

        flow, sink = build_topology("tree", n_tuples=1000, cost_us=10, selectivity=1, gil="hold", depth=3)
    """
    if n_tuples is None and seconds is None:
        raise ValueError("build_topology needs n_tuples or seconds")
    builders = {"chain": _chain, "data-parallel": _data_parallel, "tree": _tree, "reverse-tree": _reverse_tree}
    try:
        builder = builders[kind]
    except KeyError:
        raise ValueError(f"unknown topology {kind!r}; choose from {', '.join(TOPOLOGIES)}") from None
    if ops < 1 or depth < 1:
        raise ValueError("ops and depth must be >= 1")
    flow = Flow(kind)

    def busy(name: str, seed: int) -> OperatorHandle:
        return flow.add(Busy(cost_us, selectivity, gil, seed=seed), name=name)

    sink = flow.add(LatencySink(stamp_index=1), name=SINK)
    builder(flow, busy, sink, n_tuples=n_tuples, seconds=seconds, ops=ops, depth=depth)
    return flow, SINK


def _source(flow: Flow, name: str, n: int | None, seconds: float | None, first_seq: int = 0) -> OperatorHandle:
    return flow.add(StampedSource(n, seconds=seconds, first_seq=first_seq), name=name)


def _chain(flow: Flow, busy: Any, sink: OperatorHandle, *, n_tuples: int | None, seconds: float | None,
           ops: int, depth: int) -> None:
    """source → Busy × ops → sink."""
    prev = _source(flow, "src", n_tuples, seconds)
    for i in range(ops):
        prev = prev >> busy(f"busy_{i}", i)
    prev >> sink


def _data_parallel(flow: Flow, busy: Any, sink: OperatorHandle, *, n_tuples: int | None,
                   seconds: float | None, ops: int, depth: int) -> None:
    """source → round-robin split → Busy × ops in parallel → Union merge → sink."""
    src = _source(flow, "src", n_tuples, seconds)
    split = flow.add(RoundRobinSplit(ops), name="split")
    merge = flow.add(Union(ops), name="merge")
    src >> split
    for i in range(ops):
        b = busy(f"busy_{i}", i)
        flow.connect(split.out(i), b.in_(0))
        flow.connect(b.out(0), merge.in_(i))
    merge >> sink


def _tree(flow: Flow, busy: Any, sink: OperatorHandle, *, n_tuples: int | None, seconds: float | None,
          ops: int, depth: int) -> None:
    """Binary tree of 2**depth - 1 Busy ops; each inner node splits its stream over its two children.

    The 2**(depth-1) leaves fan in to the sink's one input port.
    """
    src = _source(flow, "src", n_tuples, seconds)
    level = [busy("busy_0_0", 0)]
    src >> level[0]
    for d in range(1, depth):
        nxt = []
        for i, parent in enumerate(level):
            split = flow.add(RoundRobinSplit(2), name=f"split_{d - 1}_{i}")
            parent >> split
            for c in range(2):
                child = busy(f"busy_{d}_{2 * i + c}", len(flow.operators))
                flow.connect(split.out(c), child.in_(0))
                nxt.append(child)
        level = nxt
    for leaf in level:
        leaf >> sink


def _reverse_tree(flow: Flow, busy: Any, sink: OperatorHandle, *, n_tuples: int | None,
                  seconds: float | None, ops: int, depth: int) -> None:
    """The mirror of the tree: 2**(depth-1) sources, each feeding a leaf Busy; pairs fan in upwards."""
    level = []
    for i, (n, first) in enumerate(_shares(n_tuples, 2 ** (depth - 1))):
        leaf = busy(f"busy_{depth - 1}_{i}", i)
        _source(flow, f"src_{i}", n, seconds, first_seq=first) >> leaf
        level.append(leaf)
    for d in range(depth - 2, -1, -1):
        nxt = []
        for i in range(len(level) // 2):
            parent = busy(f"busy_{d}_{i}", len(flow.operators))
            level[2 * i] >> parent
            level[2 * i + 1] >> parent
            nxt.append(parent)
        level = nxt
    level[0] >> sink


def _shares(total: int | None, k: int) -> list[tuple[int | None, int]]:
    """Split ``total`` tuples over ``k`` sources: (count, first seq) each; (None, 0) when unbounded."""
    if total is None:
        return [(None, 0)] * k
    base, extra = divmod(total, k)
    return [(base + (i < extra), i * base + min(i, extra)) for i in range(k)]
