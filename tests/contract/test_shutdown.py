"""Contract: an explicit shutdown completes with full queues and blocked operators
(C-Stream §3.2.2–3.2.3) under every execution mode, and ends operators that ignore
it after the grace period.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)

SHUTDOWN_LIMIT_S = 2.0  # the requirement: shutdown() returns within 2 seconds


def engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("elastream-") and t.is_alive()]


class SlowSink(es.Operator):
    """Takes one tuple, then sleeps a whole second (without holding a thread)."""

    def __init__(self):
        super().__init__(inputs=1, outputs=0)
        self.taken = 0

    async def process(self, ctx: es.Context):
        port = ctx.inputs[0]
        while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
            port.pop()
            self.taken += 1
            await ctx.sleep(1)


class Stubborn(es.Operator):
    """Ignores ``ctx.shutdown_requested`` and pushes forever; records that it was closed."""

    def __init__(self):
        super().__init__(inputs=0, outputs=1)
        self.closed = threading.Event()
        self.pushed = 0

    async def process(self, ctx: es.Context):
        try:
            for i in itertools.count():
                await ctx.outputs[0].push(i)
                self.pushed += 1
        finally:
            self.closed.set()


def write_blocked(handle: es.RunHandle) -> list[str]:
    return [name for name, state in handle.states().items() if state == "write_blocked"]


def sink_taken(handle: es.RunHandle) -> int:
    """Tuples the slow sink has taken, as the run's statistics report them (from any process)."""
    op = handle.stats().operators.get("slow_sink")
    return op.tuples_in if op is not None else 0


def stuck_flow() -> es.Flow:
    """An endless source feeding a sink that takes one tuple a second: every buffer fills up."""
    flow = es.Flow("stuck")
    flow.source(es.ops.FromGenerator(itertools.count), name="endless").map(lambda x: x, name="mid") \
        .sink(SlowSink(), name="slow_sink")
    return flow


def test_shutdown_of_a_stuck_flow_returns_promptly(execution_mode, wait_until):
    """Under every mode: shutdown() of a flow whose buffers are full returns its result within the limit."""
    handle = execution_mode.start(stuck_flow(), max_queue_size=4, seed=2)
    try:
        wait_until(lambda: sink_taken(handle) >= 1, what="the slow sink to take a tuple")
        t0 = time.perf_counter()
        result = handle.shutdown()
        assert time.perf_counter() - t0 < SHUTDOWN_LIMIT_S
    finally:
        if not handle.finished.is_set():
            handle.shutdown()
    assert result.shutdown
    assert result.stats.operators["slow_sink"].tuples_in >= 1
    assert engine_threads() == []


# Thread modes: the states of a running handle and the live operator are read from the run in this process.
@pytest.mark.parametrize("policy_name", ["least_recently_run", "max_queue", "random"])
def test_shutdown_with_full_buffers_and_write_blocked_operators(threads, policy_name, wait_until):
    flow = es.Flow("stuck")
    src = flow.add(es.ops.FromGenerator(itertools.count), name="endless")
    mid = flow.add(es.ops.Map(lambda x: x), name="mid")
    sink_op = SlowSink()
    src >> mid >> flow.add(sink_op, name="slow_sink")
    handle = es.Runner(threads=threads, policy=policy_name, max_queue_size=4, seed=2).start(flow)
    try:
        blocked = wait_until(lambda: write_blocked(handle), what="a write_blocked operator")
        assert set(blocked) <= {"endless", "mid"}
        t0 = time.perf_counter()
        result = handle.shutdown()
        assert time.perf_counter() - t0 < SHUTDOWN_LIMIT_S
    finally:
        if not handle.done:
            handle.shutdown()
    assert result.shutdown
    assert engine_threads() == []
    assert set(handle.states().values()) == {"completed"}
    assert handle.operator("slow_sink").taken >= 1


# Thread modes: the test reads the live operator's count and that the coroutine it ran was closed.
@pytest.mark.parametrize("threads_n", [1, 2])
def test_operator_ignoring_shutdown_is_closed_after_grace(threads_n, wait_until):
    stubborn = Stubborn()
    flow = es.Flow("stubborn")
    s = flow.add(stubborn, name="stubborn")
    s >> flow.add(es.ops.Callback(lambda x: None), name="drop")
    grace = 0.5
    handle = es.Runner(threads=threads_n, max_queue_size=4,
                       scheduling=es.SchedulingConfig(shutdown_grace_s=grace)).start(flow)
    try:
        wait_until(lambda: handle.operator("stubborn").pushed > 100, what="the stubborn operator to run")
        t0 = time.perf_counter()
        result = handle.shutdown()
        assert time.perf_counter() - t0 < grace + SHUTDOWN_LIMIT_S
    finally:
        if not handle.done:
            handle.shutdown()
    assert result.shutdown
    assert stubborn.closed.is_set(), "the runtime did not close the coroutine (its finally block never ran)"
    assert engine_threads() == []


def test_shutdown_of_finished_flow_returns_its_result(execution_mode):
    flow = es.Flow("done")
    flow.source(range(10)).sink(es.ops.Collect(), name="out")
    handle = execution_mode.start(flow)
    first = handle.wait(30)
    again = handle.shutdown()
    assert first.outputs["out"] == again.outputs["out"] == list(range(10))
