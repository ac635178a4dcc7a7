"""The one-step scheduler harness (elastream.runtime.harness): flows stepped deterministically.

* ``step`` runs one READY task once and applies its outcome; ``run_until_idle``
  stops when nothing is READY; ``run`` jumps the manual clock to the next timer.
* The same seed gives the same schedule; different seeds give other interleavings
  with the same output.
* Back-pressure: with a port of 2, the producer is write-blocked and the port
  never holds more than its capacity, checked after every step.
* A flow that cannot progress raises StuckError instead of hanging.
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.runtime.clock import ManualClock
from elastream.runtime.harness import SchedulerHarness, Step, StuckError
from elastream.runtime.traps import COMPLETED, PREEMPT, ReadWait, Sleep, WriteWait

pytestmark = pytest.mark.timeout(20)


def pipeline(n: int = 10) -> es.Flow:
    flow = es.Flow("pipeline")
    flow.source(es.ops.FromIterable(range(n)), name="src").map(lambda x: x * 2, name="double") \
        .sink(es.ops.Collect(), name="out")
    return flow


def kinds(steps: list[Step]) -> list[tuple[str, str]]:
    def kind(outcome) -> str:
        if outcome is PREEMPT:
            return "preempt"
        if outcome is COMPLETED:
            return "completed"
        return type(outcome).__name__
    return [(s.task, kind(s.outcome)) for s in steps]


def test_one_step_runs_one_task_once_and_applies_its_outcome():
    with SchedulerHarness(pipeline(4), batch_size=2) as h:
        assert h.ready() == ["src", "double", "out"]
        first = h.step()
        assert first.task == "src" and first.outcome is PREEMPT and first.now == 0.0
        assert h.tasks["double"].inputs[0].count == 2  # one batch of two, then preempted (quantum 0)
        assert h.ready() == ["double", "out", "src"]
        assert h.tasks["src"].activations == 1


def test_run_until_idle_stops_when_every_task_is_blocked_or_done():
    class Gate(es.Operator):
        """Forwards its input only once a second input delivers a token."""

        def __init__(self):
            super().__init__(inputs=2, outputs=1)

        async def process(self, ctx):
            if await ctx.wait_for_all({1: 1}) is es.Status.OVER:
                return
            while await ctx.wait_for_any({0: 1}) is es.Status.DONE:
                await ctx.outputs[0].push_many(ctx.inputs[0].pop_many())

    class Never(es.Operator):
        def __init__(self):
            super().__init__(inputs=0, outputs=1)

        async def process(self, ctx):
            await ctx.sleep(3600)

    flow = es.Flow("gate")
    data = flow.add(es.ops.FromIterable(range(3)), name="data")
    token = flow.add(Never(), name="token")
    gate = flow.add(Gate(), name="gate")
    out = flow.add(es.ops.Collect(), name="out")
    flow.connect(data.out(0), gate.in_(0))
    flow.connect(token.out(0), gate.in_(1))
    flow.connect(gate.out(0), out.in_(0))
    with SchedulerHarness(flow) as h:
        steps = h.run_until_idle()
        assert steps == len(h.history) > 0
        assert h.step() is None
        assert h.states() == {"data": "completed", "token": "sleeping", "gate": "read_blocked",
                              "out": "read_blocked"}
        assert h.sched.next_timer() == 3600.0
        assert h.outputs() == {"out": []}


def test_run_jumps_the_manual_clock_to_each_timer():
    flow = es.Flow("paced")
    flow.source(es.ops.RateLimited(range(5), rate=10.0), name="src").sink(es.ops.Collect(), name="out")
    clock = ManualClock(100.0)
    with SchedulerHarness(flow, clock=clock) as h:
        result = h.run()
        assert result.outputs == {"out": [0, 1, 2, 3, 4]}
        assert result.now == pytest.approx(100.4)  # the fifth item is due 4 periods after the first
        sleeps = [s for s in h.history if type(s.outcome) is Sleep]
        assert [s.outcome.until for s in sleeps] == pytest.approx([100.1, 100.2, 100.3, 100.4])


def test_ctx_now_and_sleep_read_the_harness_clock():
    seen: list[float] = []

    class Ticker(es.Operator):
        def __init__(self):
            super().__init__(inputs=0, outputs=0)

        async def process(self, ctx):
            for _ in range(3):
                seen.append(ctx.now)
                await ctx.sleep(0.5)

    flow = es.Flow("ticker")
    flow.add(Ticker(), name="t")
    with SchedulerHarness(flow, clock=ManualClock(7.0)) as h:
        h.run()
    assert seen == [7.0, 7.5, 8.0]


def test_a_schedule_is_reproducible_per_seed_and_seeds_explore_interleavings():
    def flow() -> es.Flow:
        f = es.Flow("two-sources")
        a = f.source(es.ops.FromIterable(range(0, 40)), name="a")
        b = f.source(es.ops.FromIterable(range(100, 140)), name="b")
        a.union(b, name="u").sink(es.ops.Collect(), name="out")
        return f

    def schedule(seed):
        with SchedulerHarness(flow(), seed=seed, max_queue_size=4, batch_size=3) as h:
            out = h.run().outputs["out"]
            return kinds(h.history), out

    runs = {seed: schedule(seed) for seed in range(6)}
    assert schedule(3) == runs[3]
    assert len({tuple(trace) for trace, _ in runs.values()}) > 1
    for _, out in runs.values():
        assert sorted(out) == list(range(0, 40)) + list(range(100, 140))
        assert [x for x in out if x < 100] == list(range(0, 40))  # each producer's order survives the union
        assert [x for x in out if x >= 100] == list(range(100, 140))


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_back_pressure_write_blocks_the_producer_and_bounds_the_port(seed):
    flow = es.Flow("back-pressure")
    flow.source(es.ops.FromIterable(range(50)), name="src").map(lambda x: x + 1, name="inc") \
        .sink(es.ops.Collect(), name="out")
    with SchedulerHarness(flow, seed=seed, max_queue_size=2, batch_size=8) as h:
        buffers = [b for t in h.tasks.values() for b in t.inputs]
        assert [b.capacity for b in buffers] == [2, 2]
        write_waits = 0
        while not h.finished:
            s = h.step()
            assert s is not None, h.states()
            assert all(b.count <= b.capacity for b in buffers)
            if type(s.outcome) is WriteWait:
                write_waits += 1
                assert h.tasks[s.task].state.value in ("write_blocked", "ready")
        assert h.outputs()["out"] == list(range(1, 51))
        assert write_waits > 0
        assert all(b.max_count == 2 for b in buffers)
        assert h.tasks["src"].pending == []


def test_a_read_wait_parks_the_consumer_until_the_producer_writes():
    flow = es.Flow("read-wait")
    flow.source(es.ops.FromIterable(range(3)), name="src").sink(es.ops.Collect(), name="out")
    with SchedulerHarness(flow, batch_size=1) as h:
        h.tasks["src"].last_scheduled = 1.0  # least_recently_run: the sink goes first
        first = h.step()
        assert first.task == "out" and type(first.outcome) is ReadWait
        assert h.states()["out"] == "read_blocked"
        assert h.step().task == "src"  # one tuple: the sink is woken by port_written
        assert h.states()["out"] == "ready"
        assert h.run().outputs == {"out": [0, 1, 2]}


def test_a_flow_that_cannot_progress_raises_stuck_error():
    class WaitsForTwo(es.Operator):
        def __init__(self):
            super().__init__(inputs=1, outputs=0)

        async def process(self, ctx):
            await ctx.wait_for_all({0: 2})

    class OneThenWaitsOutside(es.Operator):
        """Pushes one tuple, then waits for something only another process could do (nothing will)."""

        def __init__(self):
            super().__init__(inputs=0, outputs=1)

        async def process(self, ctx):
            await ctx.outputs[0].push("x")
            await ctx.wait_external(lambda: False)

    flow = es.Flow("stuck")
    flow.add(OneThenWaitsOutside(), name="src")
    flow.add(WaitsForTwo(), name="sink")
    flow.connect(flow.operators["src"].out(0), flow.operators["sink"].in_(0))
    with SchedulerHarness(flow) as h, pytest.raises(StuckError) as info:
        h.run()
    assert info.value.states == {"src": "read_blocked", "sink": "read_blocked"}


def test_an_operator_failure_is_raised_by_run():
    def boom(x):
        raise RuntimeError(f"bad {x}")

    flow = es.Flow("fails")
    flow.source(es.ops.FromIterable([1]), name="src").map(boom, name="m").sink(es.ops.Collect(), name="out")
    with SchedulerHarness(flow) as h, pytest.raises(es.OperatorError, match="bad 1"):
        h.run()


def test_close_ends_an_unfinished_flow_and_closes_its_operators():
    closed: list[str] = []

    class Forever(es.Operator):
        def __init__(self):
            super().__init__(inputs=0, outputs=0)

        async def process(self, ctx):
            try:
                while not ctx.shutdown_requested:
                    await ctx.sleep(1.0)
            finally:
                closed.append("forever")

    flow = es.Flow("forever")
    flow.add(Forever(), name="f")
    h = SchedulerHarness(flow)
    h.run_until_idle()
    assert h.states() == {"f": "sleeping"}
    h.close()
    assert h.finished and closed == ["forever"]
