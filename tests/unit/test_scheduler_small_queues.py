"""Ports of one and two tuples: a read-blocked task is woken when its port holds exactly what it waits for.

Algorithm 7 (``Scheduler.port_written``) wakes the owner once ``count >= need``.
With ``max_queue_size`` equal to the need, the count can never exceed it, so a
wake-up that waited for more would leave producer (write-blocked on the full
port) and consumer (read-blocked) waiting for each other. Each case runs on the
one-step harness (several seeded orders; a hang shows up as StuckError) and on
real worker threads (a hang shows up as the run's timeout).
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.runtime.harness import SchedulerHarness

pytestmark = pytest.mark.timeout(60)

N = 40
SEEDS = [None, 0, 1, 2, 3]


def rate_limited_to_collect() -> es.Flow:
    flow = es.Flow("paced")
    flow.source(es.ops.RateLimited(range(N), rate=5_000.0), name="src").sink(es.ops.Collect(), name="out")
    return flow


def iterable_to_collect() -> es.Flow:
    flow = es.Flow("burst")
    flow.source(es.ops.FromIterable(range(N)), name="src").map(lambda x: -x, name="neg") \
        .sink(es.ops.Collect(), name="out")
    return flow


class Pairs(es.Operator):
    """Waits for exactly two tuples at a time on its input and emits them as a pair."""

    def __init__(self):
        super().__init__(inputs=1, outputs=1)

    async def process(self, ctx):
        port = ctx.inputs[0]
        while await ctx.wait_for_all({0: 2}) is es.Status.DONE:
            await ctx.outputs[0].push((port.pop(), port.pop()))


def pairs_flow() -> es.Flow:
    flow = es.Flow("pairs")
    flow.source(es.ops.RateLimited(range(N), rate=5_000.0), name="src").then(Pairs(), name="pairs") \
        .sink(es.ops.Collect(), name="out")
    return flow


CASES = {
    # (flow, max_queue_size, expected output): a wait for 1 on a port of 1, and a wait for 2 on a port of 2
    "rate-limited, queue 1": (rate_limited_to_collect, 1, list(range(N))),
    "iterable, queue 1": (iterable_to_collect, 1, [-x for x in range(N)]),
    "pairs, queue 2": (pairs_flow, 2, [(i, i + 1) for i in range(0, N, 2)]),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", list(CASES))
def test_stepped_flow_with_a_port_holding_exactly_the_need_finishes(case, seed):
    make, max_queue, expected = CASES[case]
    with SchedulerHarness(make(), seed=seed, max_queue_size=max_queue, batch_size=4) as h:
        buffers = [b for t in h.tasks.values() for b in t.inputs]
        assert all(b.capacity == max_queue for b in buffers)
        result = h.run(max_steps=20_000)
        assert result.outputs["out"] == expected
        assert all(b.max_count <= max_queue for b in buffers)


def test_the_consumer_is_woken_by_the_write_that_fills_a_port_of_one():
    flow = rate_limited_to_collect()
    with SchedulerHarness(flow, max_queue_size=1) as h:
        h.run_until_idle()
        assert h.states() == {"src": "sleeping", "out": "read_blocked"}
        out_buf = h.tasks["out"].inputs[0]
        h.clock.set(h.sched.next_timer())
        step = h.step()  # the source pushes one tuple: the port is full, exactly the sink's need
        assert step.task == "src" and out_buf.count == 1 == out_buf.capacity
        assert h.states()["out"] == "ready"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_threaded_flow_with_a_port_holding_exactly_the_need_finishes(case, threads, run_flow):
    make, max_queue, expected = CASES[case]
    result = run_flow(make(), timeout=20, threads=threads, max_queue_size=max_queue)
    assert result.outputs["out"] == expected
