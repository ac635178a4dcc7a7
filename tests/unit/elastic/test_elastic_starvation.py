"""A source starved of its thread (elastic.view, bottleneck.cpu_bottleneck, ds2.source_rate).

One thread running a source beside a slow operator: the source's port never fills,
because the two never run at once; the source waits for the thread instead. The
controllers must still see the slow operator fall behind.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from elastic_snapshots import op

import elastream as es
from elastream.elastic.bottleneck import cpu_bottleneck, detect_bottlenecks, is_starved
from elastream.elastic.controller import Machine
from elastream.elastic.ds2 import DS2Controller, cpu_is_full, source_rate
from elastream.elastic.view import flow_view
from elastream.metrics.period import PeriodStats, WorkerPeriod
from elastream.runtime.decisions import Levels, SetReplicas
from elastream.workloads.latency import build_latency_flow

HELD = Levels(threads=(1, 1), replicas={"work": 1}, held=True)
MACHINE = Machine(cores=2, cpu_percent=50.0)


def one_thread_period(*, src_read_blocked: float = 0.0, worker_busy: float = 0.49, ended: bool = False,
                      work_busy: float = 0.47) -> PeriodStats:
    """src → work → sink over 0.5 s on one thread: ``work`` handles 10,000 tuples in ``work_busy`` s."""
    n = 10_000
    src = replace(op("src", "source", n=n, busy=0.01, sent={"work": n}), read_blocked_s=src_read_blocked,
                  ended=ended)
    ops = {"src": src,
           "work": op("work", "partitioned", n=n, busy=work_busy, sent={"sink": n}, queue=1536),
           "sink": op("sink", "sink", n=n, out=0, busy=0.01)}
    worker = WorkerPeriod(index=0, busy_s=worker_busy, cpu_s=worker_busy, utilisation=worker_busy / 0.5)
    return PeriodStats(start_s=0.0, period_s=0.5, operators=ops, workers=(worker,))


def test_a_source_waiting_for_its_busy_thread_is_starved_and_the_busy_unit_is_the_bottleneck():
    view = flow_view(one_thread_period(), HELD)
    assert view.units["src"].starved_s == pytest.approx(0.49)
    assert view.units["work"].input_congestion == 0.0          # Algorithm 9 alone sees nothing
    assert [u.name for u in detect_bottlenecks(view)] == ["work"]
    # DS2 takes the source's rate per second it could send: far above what one instance handles.
    assert source_rate(view.units["src"], view.period_s) == pytest.approx(10_000 / 0.01)


def test_ds2_spreads_a_starved_one_thread_flow_in_one_step():
    [grow] = DS2Controller().decide(one_thread_period(), HELD, MACHINE)
    assert isinstance(grow, SetReplicas) and (grow.operator, grow.count) == ("work", 2)
    assert "waited for the thread" in grow.reason


@pytest.mark.parametrize("period", [
    one_thread_period(src_read_blocked=0.45),          # a rate-driven source sleeping until its next tuple
    one_thread_period(ended=True),                     # a source that has ended
    one_thread_period(worker_busy=0.3, work_busy=0.28),  # threads not saturated: a light load
], ids=["waiting-for-its-time", "ended", "light"])
def test_no_starvation_without_a_live_source_waiting_for_saturated_threads(period):
    view = flow_view(period, HELD)
    assert not is_starved(view.units["src"], view.period_s)
    assert cpu_bottleneck(view) is None
    assert DS2Controller().decide(period, HELD, MACHINE) == []


def test_the_threads_are_saturated_over_the_time_they_ran_not_the_whole_first_period():
    # A run's first look (0.2 s) starts ~30 ms before its one worker does: busy 0.207 s of 0.245 s,
    # of 0.216 s alive. Against the whole period that is not saturated, and the source never starved.
    period = one_thread_period(worker_busy=0.43, work_busy=0.41)
    assert cpu_bottleneck(flow_view(period, HELD)) is None  # 0.86 of the period: not saturated
    alive = replace(period, workers=(replace(period.workers[0], alive_s=0.45),))
    view = flow_view(alive, HELD)
    assert is_starved(view.units["src"], view.period_s)
    assert [u.name for u in detect_bottlenecks(view)] == ["work"]


def test_a_busy_unit_that_holds_the_thread_less_than_half_the_period_is_not_named():
    period = one_thread_period(work_busy=0.2)
    assert flow_view(period, HELD).units["src"].starved_s > 0
    assert cpu_bottleneck(flow_view(period, HELD)) is None


def test_a_sleeping_source_counts_its_sleep_as_waiting_for_input():
    """A rate-driven source (``ctx.sleep_until``) waits for its next tuple's time: read-blocked, not idle."""
    flow, _ = build_latency_flow(rate=1000.0, seconds=0.5)
    stats = es.Runner(threads=1, elastic=False).run(flow, timeout=30).stats
    source = stats.operators["source"]
    assert source.read_blocked_s > 0.3  # most of its half second


def two_full_processes() -> PeriodStats:
    """The starved flow of :func:`one_thread_period`, its second process started and as busy as the first."""
    period = one_thread_period()
    busy = WorkerPeriod(index=1, busy_s=0.49, cpu_s=0.49, utilisation=0.98)
    return replace(period, workers=(*period.workers, busy))


def test_no_replica_is_added_while_every_process_fills_its_core():
    placed = Levels(threads=(1, 1), replicas={"work": 1})
    assert DS2Controller().decide(two_full_processes(), placed, MACHINE) == []  # it would only move the work
    assert DS2Controller().decide(two_full_processes(), HELD, MACHINE) != []    # a held process has CPU to give
    assert cpu_is_full(two_full_processes(), placed, MACHINE)
    # A first period: the worker process's thread ran 0.1 s of it, busy all along; room it never had.
    first = one_thread_period()
    late = WorkerPeriod(index=1, busy_s=0.1, cpu_s=0.1, utilisation=0.2, alive_s=0.1)
    first = replace(first, workers=(replace(first.workers[0], alive_s=0.5), late))
    assert cpu_is_full(first, placed, MACHINE)
    assert not cpu_is_full(one_thread_period(), placed, MACHINE)              # process 1 idles: it can take work
