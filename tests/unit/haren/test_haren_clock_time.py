"""A source's tuples carry the clock time it gives them (its scheduled time), which is the head clock time
Haren reads downstream; without one they carry the time of the push."""

from __future__ import annotations

import elastream as es
from elastream.policies.haren.features import HEAD_CLOCK_TIME
from elastream.policies.haren.operators import build_views
from elastream.runtime.harness import SchedulerHarness


class Stamped(es.Operator):
    """Pushes 1, 2 as due at 5.0, then 3 with no clock time."""

    def __init__(self):
        super().__init__(inputs=0, outputs=1)

    async def process(self, ctx) -> None:
        await ctx.outputs[0].push_many([1, 2], clock_time=5.0)
        await ctx.outputs[0].push(3)


def test_pushed_clock_time_is_the_head_clock_time_downstream():
    flow = es.Flow("stamped")
    flow.source(Stamped(), name="src").map(lambda x: x, name="m").collect(name="out")
    with SchedulerHarness(flow, policy="haren:fcfs", quantum_s=1.0) as h:
        while h.step().task != "src":
            pass
        views = {v.name: v for v in build_views(h.sched.tasks)}
        m = views["m"]
        assert m.task.front_times()[1] == 5.0
        assert HEAD_CLOCK_TIME.compute(m, 0.0, 0.0) == 5.0
        outputs = h.run().outputs["out"]
    assert outputs == [1, 2, 3]


def test_rate_limited_sources_still_emit_every_item_with_their_due_time_as_clock_time():
    flow = es.Flow("paced")
    flow.source(es.ops.RateLimited(range(3), rate=1000.0), name="src").collect(name="out")
    assert es.Runner(threads=1).run(flow, timeout=30).outputs["out"] == [0, 1, 2]
