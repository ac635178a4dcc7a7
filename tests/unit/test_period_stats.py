"""The per-period statistics snapshot: deltas between two FlowStats, and one snapshot a period for listeners."""

from __future__ import annotations

import threading

from pytest import approx

import elastream as es
from elastream.metrics.period import period_between
from elastream.metrics.stats import FlowStats, OperatorStats, WorkerStats
from elastream.metrics.timeline import entry_from_period
from elastream.processes.merge_stats import merge_stats
from elastream.runtime.decisions import Levels


def op_stats(name: str, tuples_in: int, tuples_out: int, busy_s: float) -> OperatorStats:
    return OperatorStats(name=name, kind="stateless", state="ready", activations=1, busy_s=busy_s,
                         read_blocked_s=0.0, write_blocked_s=0.0, tuples_in=tuples_in, tuples_out=tuples_out,
                         last_scheduled=0.0, read_rate=0.0, write_rate=0.0, conjunctive_wait_fraction=0.0,
                         disjunctive_wait_fraction=0.0, output_write_blocked_ratio=0.0, cpu_s=busy_s / 2)


def flow_stats(elapsed: float, tuples_in: int, tuples_out: int, busy: float) -> FlowStats:
    worker = WorkerStats(index=0, alive=True, busy_s=busy, idle_s=elapsed - busy, alive_s=elapsed, dispatches=1,
                         utilisation=busy / elapsed, cpu_s=busy / 2)
    return FlowStats(elapsed_s=elapsed, threads=1, policy="p",
                     operators={"f": op_stats("f", tuples_in, tuples_out, busy)}, workers=(worker,))


def test_a_period_holds_deltas_and_the_true_rate_per_busy_second():
    period = period_between(flow_stats(1.0, 100, 50, 0.2), flow_stats(3.0, 1100, 550, 0.7))
    f = period.operators["f"]
    assert (period.start_s, period.period_s) == (1.0, 2.0)
    assert (f.tuples_in, f.tuples_out) == (1000, 500)
    assert f.busy_s == approx(0.5) and f.true_rate == approx(2000.0)      # per busy second, not per wall second
    assert f.selectivity == 0.5 and f.cost_per_tuple_s == approx(0.0005)
    worker = period.workers[0]
    assert worker.busy_s == approx(0.5) and worker.utilisation == approx(0.25) and worker.cpu_share == approx(0.5)


def _worker(busy: float, alive_s: float, alive: bool = True) -> WorkerStats:
    return WorkerStats(index=0, alive=alive, busy_s=busy, idle_s=0.0, alive_s=alive_s, dispatches=1,
                       utilisation=0.0, cpu_s=busy)


def _parts(*parts: tuple[WorkerStats, ...], elapsed: float) -> FlowStats:
    return merge_stats([FlowStats(elapsed, len(p), "p", {}, p) for p in parts], elapsed, 2, [], {})


def test_a_thread_added_in_process_0_leaves_the_other_processes_threads_matched():
    # Process 0 gains a thread between the snapshots: process 1's thread moves from number 1 to 2.
    before = _parts((_worker(1.0, 2.0),), (_worker(1.5, 2.0),), elapsed=2.0)
    after = _parts((_worker(1.5, 3.0), _worker(0.2, 0.5)), (_worker(2.5, 3.0),), elapsed=3.0)
    assert [(w.index, w.process) for w in after.workers] == [(0, 0), (1, 0), (2, 1)]
    period = period_between(before, after)
    assert [w.busy_s for w in period.workers] == approx([0.5, 0.2, 1.0])  # not process 1's whole 2.5 s
    assert period.busy_s() == approx(1.7) and period.cpu_s() == approx(1.7)


def test_a_retired_thread_stays_listed_and_leaves_the_timelines_mean_utilisation():
    before = _parts((_worker(1.0, 2.0), _worker(0.5, 1.0)), (_worker(1.5, 2.0),), elapsed=2.0)
    after = _parts((_worker(2.0, 3.0), _worker(0.5, 1.0, alive=False)), (_worker(2.5, 3.0),), elapsed=3.0)
    period = period_between(before, after)
    assert [w.alive_s for w in period.workers] == approx([1.0, 0.0, 1.0])
    entry = entry_from_period(period, Levels(threads=(1, 1)))
    assert entry.utilisation == approx(1.0)  # the two threads that ran, each busy all the period


def test_the_first_period_counts_from_the_start():
    period = period_between(None, flow_stats(2.0, 10, 10, 1.0))
    assert period.period_s == 2.0 and period.operators["f"].tuples_in == 10


def test_listeners_of_a_run_get_one_snapshot_a_period():
    flow = es.Flow("periods")
    gate = threading.Event()
    flow.source(es.ops.FromGenerator(lambda: iter(range(10**9)))).map(lambda x: x).sink(es.ops.Collect(), name="out")
    handle = es.Runner(scheduling=es.SchedulingConfig(stats_period_ms=20)).start(flow)
    got = []

    def listen(period):
        got.append(period)
        if len(got) >= 3:
            gate.set()

    try:
        handle.add_period_listener(listen)
        assert gate.wait(30), "no three periods within 30 s"
    finally:
        handle.shutdown()
    assert all(p.period_s > 0 for p in got[:3])
    assert [p.start_s for p in got[:3]] == sorted(p.start_s for p in got[:3])
    assert sum(p.operators["out"].tuples_in for p in got[:3]) > 0


def test_a_keyed_split_reports_its_load_per_key_group():
    flow = es.Flow("groups")
    (flow.source(range(400), name="src").key_by(lambda x: x % 4, partitions=4)
         .reduce(lambda a, x: a + x, initial=int, name="sum").sink(es.ops.Collect(), name="out"))
    handle = es.Runner(replicas={"sum": 2}).start(flow)
    result = handle.wait(30)
    load = result.stats.operators["sum#split"].key_group_load
    assert len(load) == 4 and all(n > 0 for n in load)   # 4 key groups, every one carried tuples
    assert result.stats.operators["out"].key_group_load == ()
    assert period_between(None, result.stats).operators["sum#split"].key_group_load == load
