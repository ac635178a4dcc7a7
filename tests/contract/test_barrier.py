"""Contract: the Barrier of DESIGN.md (C-Stream Listing 2) under every policy and execution mode.

Its output is ``zip`` of its inputs, and with one input far faster than the
other, back-pressure bounds every input buffer by ``max_queue_size`` plus the
number of producers on the port (C-Stream §3.2.2, Algorithm 3).
"""

from __future__ import annotations

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)

MAX_QUEUE = 16


class Barrier(es.Operator):  # C-Stream Listing 2, exactly as in DESIGN.md
    def __init__(self, n):
        super().__init__(inputs=n, outputs=1)

    async def process(self, ctx: es.Context):
        spec = {port: 1 for port in ctx.inputs}
        while not ctx.shutdown_requested:
            if await ctx.wait_for_all(spec) is es.Status.OVER:
                break
            await ctx.outputs[0].push(tuple(p.pop() for p in ctx.inputs))


class SlowSource(es.Operator):
    """Pushes one tuple, then sleeps (without holding a worker thread)."""

    def __init__(self, items, pause_s=0.0002):
        super().__init__(inputs=0, outputs=1)
        self.items = list(items)
        self.pause_s = pause_s

    async def process(self, ctx: es.Context):
        out = ctx.outputs[0]
        for x in self.items:
            if ctx.shutdown_requested:
                break
            await out.push(x)
            await ctx.sleep(self.pause_s)


def barrier_flow(a_op: es.Operator, b_op: es.Operator, *, slow_b_path: bool = False,
                 barrier: es.Operator | None = None) -> es.Flow:
    """The DESIGN.md sample flow: a, b -> barrier -> sink (optionally b through a Busy; ``barrier``: another
    two-input operator in the Barrier's place)."""
    flow = es.Flow("barrier")
    a = flow.add(a_op, name="a")
    b = flow.add(b_op, name="b")
    bar = flow.add(Barrier(2) if barrier is None else barrier, name="barrier")
    sink = flow.add(es.ops.Collect(), name="sink")
    flow.connect(a.out(0), bar.in_(0))
    if slow_b_path:
        busy = flow.add(es.ops.Busy(cost_us=20.0), name="busy")
        flow.connect(b.out(0), busy.in_(0))
        flow.connect(busy.out(0), bar.in_(1))
    else:
        flow.connect(b.out(0), bar.in_(1))
    flow.connect(bar.out(0), sink.in_(0))
    return flow


def assert_buffers_bounded(stats: es.FlowStats, max_queue: int) -> None:
    """Every input port held at most its capacity plus one tuple per producer (C-Stream Algorithm 3).

    The capacity is ``max_queue_size``, except in a replicated run (operators ``X#split`` / ``X#merge``):
    a split declares a larger input and a merge a larger output (``input_capacity`` / ``output_capacity``).
    """
    replicated = any(name.endswith("#merge") for name in stats.operators)
    for op in stats.operators.values():
        for port in op.inputs:
            where = f"{op.name}.in_({port.port})"
            assert replicated or port.capacity == max_queue, f"{where} holds {port.capacity} tuples, not {max_queue}"
            assert port.max_size <= port.capacity + port.publishers, (
                f"{where} held {port.max_size} tuples > capacity {port.capacity} + {port.publishers} publishers")


def test_barrier_output_is_zip_of_inputs(policy, execution_mode):
    a_items = list(range(3000))
    b_items = [-x for x in range(2500)]
    flow = barrier_flow(es.ops.FromIterable(a_items), es.ops.FromIterable(b_items))
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, batch_size=32, seed=7)
    assert result.outputs["sink"] == list(zip(a_items, b_items))
    assert_buffers_bounded(result.stats, MAX_QUEUE)


def test_barrier_with_slow_coroutine_input_keeps_buffers_bounded(policy, execution_mode):
    fast = list(range(20_000))
    slow = [f"s{i}" for i in range(300)]
    flow = barrier_flow(es.ops.FromIterable(fast), SlowSource(slow))
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, seed=3)
    assert result.outputs["sink"] == list(zip(fast, slow))
    ports = result.stats.operators["barrier"].inputs
    assert ports[0].max_size == MAX_QUEUE, "the fast input never filled up: no back-pressure was exercised"
    assert_buffers_bounded(result.stats, MAX_QUEUE)


def test_barrier_with_busy_path_keeps_buffers_bounded(policy, execution_mode):
    """Input a closes early holding tuples while the Busy path still delivers b."""
    n = 2000
    flow = barrier_flow(es.ops.FromIterable(range(n)), es.ops.FromIterable(range(n, 2 * n)), slow_b_path=True)
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, batch_size=8, seed=5)
    assert result.outputs["sink"] == list(zip(range(n), range(n, 2 * n)))
    assert_buffers_bounded(result.stats, MAX_QUEUE)


def test_barrier_of_three_with_fan_out_and_fan_in(policy, execution_mode):
    """One source fanned out to two ports, and a port fed by two producers (bound + 2)."""
    flow = es.Flow("barrier3")
    a = flow.add(es.ops.FromIterable(range(1000)), name="a")
    b1 = flow.add(es.ops.FromIterable(range(0, 1000, 2)), name="b1")
    b2 = flow.add(es.ops.FromIterable(range(1, 1000, 2)), name="b2")
    bar = flow.add(Barrier(3), name="barrier")
    sink = flow.add(es.ops.Collect(), name="sink")
    flow.connect(a.out(0), bar.in_(0))
    flow.connect(a.out(0), bar.in_(1))
    flow.connect(b1.out(0), bar.in_(2))
    flow.connect(b2.out(0), bar.in_(2))
    flow.connect(bar.out(0), sink.in_(0))
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, batch_size=16, seed=1)
    out = result.outputs["sink"]
    assert [(x, y) for x, y, _ in out] == [(i, i) for i in range(1000)]
    assert sorted(z for _, _, z in out) == list(range(1000))
    # Each producer's own order survives fan-in.
    zs = [z for _, _, z in out]
    assert [z for z in zs if z % 2 == 0] == list(range(0, 1000, 2))
    assert [z for z in zs if z % 2 == 1] == list(range(1, 1000, 2))
    assert result.stats.operators["barrier"].inputs[2].publishers == 2
    assert_buffers_bounded(result.stats, MAX_QUEUE)


def test_barrier_blocks_while_its_closed_input_still_holds_tuples(execution_mode):
    """Input a closes at once holding 5 tuples; b delivers 5 tuples 20 ms apart.

    The Barrier should be READ_BLOCKED between b's tuples (C-Stream Algorithm 1
    returns OVER only for a closed port *without enough tuples*), so it needs a
    handful of activations, not one per scheduler pass.
    """
    flow = barrier_flow(es.ops.FromIterable(range(5)), SlowSource(range(5), pause_s=0.02))
    result = execution_mode.run(flow, max_queue_size=MAX_QUEUE)
    assert result.outputs["sink"] == [(i, i) for i in range(5)]
    assert result.stats.operators["barrier"].activations <= 100


class ChunkedSource(es.Operator):
    """Pushes ``items`` in chunks of the given sizes (cycled): uneven chunks, some larger than a port."""

    def __init__(self, items, sizes):
        super().__init__(inputs=0, outputs=1)
        self.items = list(items)
        self.sizes = list(sizes)

    async def process(self, ctx: es.Context):
        out, i, k = ctx.outputs[0], 0, 0
        while i < len(self.items) and not ctx.shutdown_requested:
            n = self.sizes[k % len(self.sizes)]
            await out.push_many(self.items[i:i + n])
            i, k = i + n, k + 1


class BatchBarrier(es.Operator):
    """Waits for ``n`` tuples on every port (``n`` cycling through ``takes``), pops them with ``pop_many(n)``
    and pushes the zipped rows: takes cut the producers' chunks at other places than they were pushed."""

    def __init__(self, ports, takes):
        super().__init__(inputs=ports, outputs=1)
        self.takes = list(takes)

    async def process(self, ctx: es.Context):
        k = 0
        while not ctx.shutdown_requested:
            n = self.takes[k % len(self.takes)]
            k += 1
            if await ctx.wait_for_all({port: n for port in ctx.inputs}) is es.Status.OVER:
                # the end: pair what is left one by one
                while all(len(p) for p in ctx.inputs):
                    await ctx.outputs[0].push(tuple(p.pop() for p in ctx.inputs))
                break
            await ctx.outputs[0].push_many(list(zip(*(p.pop_many(n) for p in ctx.inputs))))


A_SIZES = (1, 7, 3, 20, 2, 16, 5)  # 20: more than a port holds, pushed in parts under back-pressure
B_SIZES = (9, 1, 1, 13, 4)


def test_barrier_output_content_and_order_with_uneven_input_chunks(policy, execution_mode):
    a_items = [("a", i) for i in range(1500)]
    b_items = [("b", i) for i in range(1400)]
    flow = barrier_flow(ChunkedSource(a_items, A_SIZES), ChunkedSource(b_items, B_SIZES))
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, seed=11)
    out = result.outputs["sink"]
    assert out == list(zip(a_items, b_items))  # exact content and order, the longer input's tail dropped
    assert_buffers_bounded(result.stats, MAX_QUEUE)


def test_batch_barrier_taking_partial_chunks_keeps_content_and_order(policy, execution_mode):
    a_items = list(range(1000))
    b_items = [-x for x in range(1000)]
    flow = barrier_flow(ChunkedSource(a_items, A_SIZES), ChunkedSource(b_items, B_SIZES),
                        barrier=BatchBarrier(2, takes=(3, 1, 5, 2, 8)))
    result = execution_mode.run(flow, policy=policy, max_queue_size=MAX_QUEUE, seed=13)
    assert result.outputs["sink"] == list(zip(a_items, b_items))
    assert_buffers_bounded(result.stats, MAX_QUEUE)
