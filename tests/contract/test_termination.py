"""Contract: flows terminate when their sources end (C-Stream §3.2.3), under every
policy and execution mode, with the right outputs; ``wait_for_any`` returns OVER
only when no port can ever satisfy it (Algorithm 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)

N = 2000
RUN_KW = dict(max_queue_size=8, batch_size=16, seed=11)


def double(x):
    return 2 * x


def negate(x):
    return -x


def test_chain_terminates_in_order(policy, execution_mode):
    flow = es.Flow("chain")
    src = flow.add(es.ops.FromIterable(range(N)), name="src")
    m1 = flow.add(es.ops.Map(double), name="m1")
    f = flow.add(es.ops.Filter(lambda x: x % 3 != 0), name="f")
    fm = flow.add(es.ops.FlatMap(lambda x: (x, x + 1)), name="fm")
    sink = flow.add(es.ops.Collect(), name="sink")
    src >> m1 >> f >> fm >> sink
    result = execution_mode.run(flow, policy=policy, **RUN_KW)
    expected = [y for x in range(N) if (2 * x) % 3 != 0 for y in (2 * x, 2 * x + 1)]
    assert result.outputs["sink"] == expected
    assert all(op.state == "completed" for op in result.stats.operators.values())


@pytest.mark.parametrize("join", ["union", "fan_in"])
def test_diamond_terminates(policy, execution_mode, join):
    """One source fanned out to two Maps, joined by Union(2) or by fan-in into one port."""
    flow = es.Flow("diamond")
    src = flow.add(es.ops.FromIterable(range(N)), name="src")
    left = flow.add(es.ops.Map(double), name="left")
    right = flow.add(es.ops.Map(negate), name="right")
    sink = flow.add(es.ops.Collect(), name="sink")
    src >> left
    src >> right
    if join == "union":
        union = flow.add(es.ops.Union(2), name="union")
        flow.connect(left.out(0), union.in_(0))
        flow.connect(right.out(0), union.in_(1))
        union >> sink
    else:
        left >> sink
        right >> sink
    result = execution_mode.run(flow, policy=policy, **RUN_KW)
    out = result.outputs["sink"]
    assert Counter(out) == Counter([2 * x for x in range(N)] + [-x for x in range(1, N)] + [0])
    # Each branch's own order survives the merge (0 comes from both; drop it).
    assert [x for x in out if x > 0] == [2 * x for x in range(1, N)]
    assert [x for x in out if x < 0] == [-x for x in range(1, N)]


def test_tree_terminates(policy, execution_mode):
    """A binary tree of depth 3: each node splits its stream by one bit, eight leaf sinks."""
    flow = es.Flow("tree")
    root = flow.add(es.ops.FromIterable(range(N)), name="root")
    frontier = [(root, "")]
    for depth in range(3):
        nxt = []
        for parent, bits in frontier:
            for bit in (0, 1):
                child = flow.add(es.ops.Filter(lambda x, d=depth, b=bit: (x >> d) & 1 == b),
                                 name=f"f{bits}{bit}")
                parent >> child
                nxt.append((child, f"{bits}{bit}"))
        frontier = nxt
    for leaf, bits in frontier:
        leaf >> flow.add(es.ops.Collect(), name=f"sink{bits}")
    result = execution_mode.run(flow, policy=policy, **RUN_KW)
    assert len(result.outputs) == 8
    for _, bits in frontier:
        want = [x for x in range(N) if all((x >> d) & 1 == int(b) for d, b in enumerate(bits))]
        assert result.outputs[f"sink{bits}"] == want


def test_reverse_tree_terminates(policy, execution_mode):
    """Eight sources of different lengths merged pairwise by Union(2) down to one sink."""
    flow = es.Flow("reverse_tree")
    streams = []
    expected = []
    for i in range(8):
        items = [(i, j) for j in range(100 * (i + 1))]
        expected.extend(items)
        streams.append(flow.add(es.ops.FromIterable(items), name=f"src{i}"))
    level = 0
    while len(streams) > 1:
        merged = []
        for k in range(0, len(streams), 2):
            u = flow.add(es.ops.Union(2), name=f"u{level}_{k // 2}")
            flow.connect(streams[k].out(0), u.in_(0))
            flow.connect(streams[k + 1].out(0), u.in_(1))
            merged.append(u)
        streams = merged
        level += 1
    streams[0] >> flow.add(es.ops.Collect(), name="sink")
    result = execution_mode.run(flow, policy=policy, **RUN_KW)
    out = result.outputs["sink"]
    assert Counter(out) == Counter(expected)
    for i in range(8):
        assert [t for t in out if t[0] == i] == [(i, j) for j in range(100 * (i + 1))]


# -- wait_for_any (Algorithm 2) -------------------------------------------------------

class RecordingMerge(es.Operator):
    """Two inputs read with wait_for_any; records each status with both ports' state."""

    def __init__(self):
        super().__init__(inputs=2, outputs=1)
        # Shared with the run's instance (a shallow copy), which is the one that opens.
        self.running: list[es.Context] = []
        self.seen: list[tuple[es.Status, bool, bool, int, int]] = []

    def open(self, ctx: es.Context) -> None:
        self.running.append(ctx)

    def in0_exhausted(self) -> bool:
        """True once input 0 is closed and empty (read from the late source's thread)."""
        return bool(self.running) and self.running[-1].inputs[0].exhausted

    async def process(self, ctx: es.Context):
        p0, p1 = ctx.inputs
        out = ctx.outputs[0]
        while True:
            status = await ctx.wait_for_any({p0: 1, p1: 1})
            self.seen.append((status, p0.closed, p1.closed, len(p0), len(p1)))
            if status is es.Status.OVER:
                break
            port = p0 if len(p0) else p1
            await out.push((port.index, port.pop()))


class GatedSource(es.Operator):
    """Pushes its items only once ``gate()`` holds, with a short sleep between them."""

    def __init__(self, items, gate: Callable[[], bool]):
        super().__init__(inputs=0, outputs=1)
        self.items = list(items)
        self.gate = gate

    async def process(self, ctx: es.Context):
        while not self.gate():
            if ctx.shutdown_requested:
                return
            await ctx.sleep(0.001)
        for x in self.items:
            await ctx.outputs[0].push(x)
            await ctx.sleep(0.0005)


# Thread modes only: the late source reads the merge's live input port, and the test reads the statuses the
# run's instance recorded, which only a run in this process shares with the flow's object.
def test_wait_for_any_is_done_until_every_port_closed_and_drained(policy, threads, run_flow):
    merge = RecordingMerge()
    flow = es.Flow("any")
    early = flow.add(es.ops.FromIterable(range(3)), name="early")
    late = flow.add(GatedSource(range(100, 120), merge.in0_exhausted), name="late")
    m = flow.add(merge, name="merge")
    sink = flow.add(es.ops.Collect(), name="sink")
    flow.connect(early.out(0), m.in_(0))
    flow.connect(late.out(0), m.in_(1))
    m >> sink
    result = run_flow(flow, threads=threads, policy=policy, **RUN_KW)

    assert result.outputs["sink"] == [(0, 0), (0, 1), (0, 2)] + [(1, x) for x in range(100, 120)]
    statuses = [s for s, *_ in merge.seen]
    assert statuses == [es.Status.DONE] * 23 + [es.Status.OVER]
    # Every DONE had a tuple to pop; the 20 from the late port came while in_(0) was closed.
    assert all(n0 + n1 > 0 for s, _, _, n0, n1 in merge.seen if s is es.Status.DONE)
    assert sum(1 for s, c0, _, n0, _ in merge.seen if s is es.Status.DONE and c0 and n0 == 0) == 20
    _, c0, c1, n0, n1 = merge.seen[-1]
    assert (c0, c1, n0, n1) == (True, True, 0, 0), "OVER returned while a port could still deliver"
