"""The statistics monitor: recent rates sampled by the workers themselves, a thread only for hooks."""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.runtime.scheduler import Scheduler

pytestmark = pytest.mark.timeout(30)

RATE = 2_000.0


def paced_flow(seconds: float) -> es.Flow:
    flow = es.Flow("paced")
    flow.source(es.ops.RateLimited(range(int(RATE * seconds)), rate=RATE), name="src").map(lambda x: x, name="m").sink(es.ops.Collect(), name="out")
    return flow


def monitor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "elastream-monitor" and t.is_alive()]


def test_rates_are_sampled_by_the_workers_without_a_monitor_thread():
    handle = es.Runner(stats_period_ms=50).start(paced_flow(1.0))
    try:
        time.sleep(0.5)
        assert monitor_threads() == []
        rate = handle.stats().operators["out"].read_rate
        assert RATE / 4 < rate < RATE * 4, rate
    finally:
        handle.wait(10)


def test_a_policy_that_wants_ticks_gets_them_from_the_monitor_thread():
    handle = es.Runner(policy="ct", stats_period_ms=50).start(paced_flow(0.6))
    try:
        time.sleep(0.3)
        assert monitor_threads() == ["elastream-monitor"]
    finally:
        handle.wait(10)
    assert monitor_threads() == []


class Nap(es.Operator):
    """A source that emits ``burst`` tuples in ``steps`` steps 10 ms apart, sleeps (its worker idle meanwhile),
    then ends."""

    def __init__(self, burst: int, nap_s: float, steps: int = 10):
        super().__init__(inputs=0, outputs=1)
        self.burst, self.nap_s, self.steps = burst, nap_s, steps

    async def process(self, ctx) -> None:
        step = self.burst // self.steps
        for i in range(self.steps):
            await ctx.outputs[0].push_many(list(range(i * step, (i + 1) * step)))
            await ctx.sleep(0.01)
        await ctx.sleep(self.nap_s)


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def test_an_idle_worker_wakes_for_the_periodic_sampling():
    flow = es.Flow("naps")
    flow.source(Nap(1_000, 1.0, steps=50), name="src").sink(es.ops.Collect(), name="out")  # a 0.5 s burst
    handle = es.Runner(stats_period_ms=20).start(flow)
    rate = lambda: handle.stats().operators["out"].read_rate  # noqa: E731
    assert wait_until(lambda: rate() > 0.0, 2.0)  # sampled during the burst
    # then sampled again while every worker is idle (the source naps): nothing flowed over the last period
    assert wait_until(lambda: rate() == 0.0, 0.8)
    assert handle.states()["src"] == "sleeping"
    assert handle.wait(10).outputs["out"] == list(range(1_000))


def test_the_periodic_call_runs_between_activations_and_while_idle():
    flow = es.Flow("naps")
    flow.source(Nap(10, 0.3), name="src").sink(es.ops.Collect(), name="out")
    handle = es.Runner(stats_period_ms=100_000).start(flow)  # the monitor's own sampling: practically never
    calls: list[float] = []
    sched: Scheduler = handle.sched
    sched.set_periodic(0.02, calls.append)
    handle.wait(10)
    assert len(calls) >= 5  # ~0.3 s with the one worker idle: it woke for the call
    assert all(b > a for a, b in zip(calls, calls[1:]))


def test_a_hook_added_while_running_starts_the_monitor_thread():
    handle = es.Runner(stats_period_ms=20).start(paced_flow(0.6))
    ticks: list[int] = []
    try:
        time.sleep(0.05)
        assert monitor_threads() == []
        handle.monitor.add_hook(lambda: ticks.append(1))
        assert wait_until(lambda: len(ticks) >= 3, 2.0)
        assert handle.stats().operators["out"].read_rate > 0.0  # still sampled by the workers
    finally:
        handle.wait(10)
    assert monitor_threads() == []


def test_idle_workers_do_not_wake_for_the_periodic_call_while_one_is_busy():
    started = threading.Event()

    def slow(x):
        started.set()
        time.sleep(1.0)  # one long activation (the GIL released): the other two workers idle meanwhile
        return x

    flow = es.Flow("busy")
    flow.source([1], name="src").map(slow, name="slow").sink(es.ops.Collect(), name="out")
    handle = es.Runner(threads=3, stats_period_ms=100_000).start(flow)
    calls: list[float] = []
    handle.sched.set_periodic(0.02, calls.append)
    assert started.wait(5)
    time.sleep(0.05)
    during = len(calls)
    time.sleep(0.25)
    # an idle worker keeping the call while another computes would have made ~12 calls by now
    assert len(calls) - during <= 1
    handle.wait(10)
