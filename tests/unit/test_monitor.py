"""The statistics monitor: recent rates sampled by the workers themselves, a thread only for hooks.

Rates and the periodic call are checked on the one-step harness with a manual
clock (exact instants, no sleeps); what only real worker threads show (which
idle worker keeps the periodic call, the hook thread) is checked by waiting on
conditions, never on elapsed time.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.runtime.clock import ManualClock
from elastream.runtime.harness import SchedulerHarness
from elastream.runtime.monitor import Monitor

pytestmark = pytest.mark.timeout(30)

RATE = 2_000.0


def paced_flow(n: int) -> es.Flow:
    flow = es.Flow("paced")
    flow.source(es.ops.RateLimited(range(n), rate=RATE), name="src").map(lambda x: x, name="m") \
        .sink(es.ops.Collect(), name="out")
    return flow


def monitor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "elastream-monitor" and t.is_alive()]


class Nap(es.Operator):
    """A source that emits ``burst`` tuples in ``steps`` steps ``step_s`` apart, sleeps ``nap_s``, then ends."""

    def __init__(self, burst: int, nap_s: float, steps: int = 10, step_s: float = 0.01):
        super().__init__(inputs=0, outputs=1)
        self.burst, self.nap_s, self.steps, self.step_s = burst, nap_s, steps, step_s

    async def process(self, ctx) -> None:
        step = self.burst // self.steps
        for i in range(self.steps):
            await ctx.outputs[0].push_many(list(range(i * step, (i + 1) * step)))
            await ctx.sleep(self.step_s)
        await ctx.sleep(self.nap_s)


def test_sample_rates_divides_the_counts_by_the_clock_interval():
    with SchedulerHarness(paced_flow(100), clock=ManualClock(5.0)) as h:
        monitor = Monitor(h.sched, 0.05)
        assert monitor.clock is h.clock  # the scheduler's clock by default
        monitor.sample_rates()  # the baseline, at 5.0
        while h.tasks["out"].tuples_in < 40:
            if h.step() is None:
                h.clock.set(h.sched.next_timer())
        dt = h.clock.now() - 5.0
        monitor.sample_rates()
        out = h.tasks["out"]
        assert out.read_rate == pytest.approx(out.tuples_in / dt)
        assert h.tasks["src"].write_rate == pytest.approx(h.tasks["src"].tuples_out / dt)
        assert out.read_rate == pytest.approx(RATE, rel=0.05)  # RateLimited paces by the same clock
        monitor.sample_rates()  # no time passed: the rates are left as they were
        assert out.read_rate == pytest.approx(RATE, rel=0.05)


def test_rates_are_sampled_by_the_workers_without_a_monitor_thread():
    with SchedulerHarness(paced_flow(400)) as h:
        monitor = Monitor(h.sched, 0.02)
        monitor.start()  # no hooks: sampling is the scheduler's periodic call, made between dispatches
        assert monitor_threads() == []
        rates = []
        while not h.finished:
            if h.step() is None:
                h.clock.set(h.sched.next_timer())
            rates.append(h.tasks["out"].read_rate)
        monitor.stop()
    assert monitor_threads() == []
    sampled = [r for r in rates if r > 0.0]
    assert sampled and all(r == pytest.approx(RATE, rel=0.05) for r in sampled)


def test_the_periodic_call_runs_between_activations_at_its_due_times():
    flow = es.Flow("naps")
    tick = 1 / 64  # binary fractions: the manual clock's sums are exact
    flow.source(Nap(10, 16 * tick, step_s=tick), name="src").sink(es.ops.Collect(), name="out")
    with SchedulerHarness(flow) as h:
        calls: list[float] = []
        h.sched.set_periodic(2 * tick, calls.append)
        assert h.run().outputs["out"] == list(range(10))
    # due every two ticks during the ten one-tick steps, then once more when the nap's timer fires
    assert calls == [2 * tick, 4 * tick, 6 * tick, 8 * tick, 10 * tick, 26 * tick]


def test_a_policy_that_wants_ticks_gets_them_from_the_monitor_thread(wait_until):
    flow = es.Flow("naps")
    flow.source(Nap(100, 3600.0), name="src").sink(es.ops.Collect(), name="out")
    handle = es.Runner(policy="ct", scheduling=es.SchedulingConfig(stats_period_ms=20)).start(flow)
    try:
        assert monitor_threads() == ["elastream-monitor"]  # started with the run, before any tick
        wait_until(lambda: handle.states()["src"] == "sleeping" and handle.stats().operators["out"].tuples_in == 100,
                   what="the burst to arrive")
    finally:
        handle.shutdown(10)
    assert monitor_threads() == []


def test_an_idle_worker_keeps_the_periodic_call_and_samples_while_all_are_idle(wait_until):
    flow = es.Flow("naps")
    flow.source(Nap(1_000, 3600.0, steps=50), name="src").sink(es.ops.Collect(), name="out")
    handle = es.Runner(scheduling=es.SchedulingConfig(stats_period_ms=20)).start(flow)
    try:
        rate = lambda: handle.stats().operators["out"].read_rate  # noqa: E731
        wait_until(lambda: rate() > 0.0, what="a rate sampled during the burst")
        wait_until(lambda: handle.states()["src"] == "sleeping"
                   and handle.stats().operators["out"].tuples_in == 1_000, what="the burst to end")
        # every worker idle (the source naps for an hour): one of them keeps the periodic call ...
        wait_until(lambda: handle.sched.periodic_keeper is not None, what="an idle worker keeping the periodic call")
        # ... and samples again: nothing flowed over the last period
        wait_until(lambda: rate() == 0.0, what="a sample taken while every worker is idle")
        assert monitor_threads() == []
    finally:
        result = handle.shutdown(10)
    assert result.outputs["out"] == list(range(1_000))


def test_a_hook_added_while_running_starts_the_monitor_thread(wait_until):
    flow = es.Flow("naps")
    flow.source(Nap(1_000, 3600.0, steps=50), name="src").sink(es.ops.Collect(), name="out")
    handle = es.Runner(scheduling=es.SchedulingConfig(stats_period_ms=20)).start(flow)
    ticks: list[int] = []
    try:
        assert monitor_threads() == []
        handle.monitor.add_hook(lambda: ticks.append(1))
        assert monitor_threads() == ["elastream-monitor"]
        wait_until(lambda: len(ticks) >= 3, what="three hook ticks")
        wait_until(lambda: handle.stats().operators["out"].read_rate > 0.0,
                   what="rates still sampled by the workers")
    finally:
        handle.shutdown(10)
    assert monitor_threads() == []


def test_idle_workers_do_not_keep_the_periodic_call_while_one_is_busy(wait_until):
    started, release = threading.Event(), threading.Event()

    def slow(x):
        started.set()
        assert release.wait(20)  # one long activation (the GIL released): the other two workers idle meanwhile
        return x

    flow = es.Flow("busy")
    flow.source([1], name="src").map(slow, name="slow").sink(es.ops.Collect(), name="out")
    handle = es.Runner(threads=3, scheduling=es.SchedulingConfig(stats_period_ms=100_000)).start(flow)
    sched = handle.sched
    calls: list[float] = []
    try:
        sched.set_periodic(0.02, calls.append)
        assert started.wait(10)

        def idle_without_keeper() -> bool:
            # A worker that went idle before ``slow`` started may keep the call until it next wakes; after
            # that, the idle ones wait for work or timers only (the busy one makes the call at its next
            # dispatch). Were an idle worker to keep it while another is busy, it would be set at every
            # look under the lock.
            with sched.lock:
                return sched.idle_workers == 2 and sched.busy_workers == 1 and sched.periodic_keeper is None

        wait_until(idle_without_keeper, what="two idle workers, neither keeping the periodic call")
    finally:
        release.set()
    assert handle.wait(10).outputs["out"] == [1]
