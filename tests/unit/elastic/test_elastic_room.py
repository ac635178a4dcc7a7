"""The Amdahl bound of one period (elastic.room): threads are not explored where one serial unit does the work."""

from __future__ import annotations

from elastic_snapshots import op, workers_period

from elastream.elastic.controller import Machine
from elastream.elastic.room import threads_worth
from elastream.elastic.trend import TrendController
from elastream.elastic.utilization import UtilizationController
from elastream.metrics.period import PeriodStats, WorkerPeriod
from elastream.runtime.decisions import Levels

MACHINE = Machine(cores=8, cpu_percent=30.0)
CHAIN = ("m0", "m1", "m2")


def chain_period(chain_busy: float, source_busy: float = 0.05, sink_busy: float = 0.02) -> PeriodStats:
    """src → m0 → m1 → m2 → sink over 1 s, one thread busy all of it; the maps share ``chain_busy``."""
    n = 100_000
    ops = {"src": op("src", "source", n=n, busy=source_busy, sent={"m0": n})}
    for i, name in enumerate(CHAIN):
        nxt = CHAIN[i + 1] if i + 1 < len(CHAIN) else "sink"
        ops[name] = op(name, n=n, busy=chain_busy / len(CHAIN), sent={nxt: n})
    ops["sink"] = op("sink", "sink", n=n, out=0, busy=sink_busy)
    busy = chain_busy + source_busy + sink_busy
    return PeriodStats(start_s=0.0, period_s=1.0, operators=ops,
                       workers=(WorkerPeriod(index=0, busy_s=busy, cpu_s=busy, utilisation=min(1.0, busy)),))


def test_a_fused_chain_that_does_most_of_the_work_bounds_the_flow_at_one_thread_when_held():
    # Held in Runner()'s processes, the chain is one task in process 0 whatever the threads.
    period = chain_period(0.9)
    assert threads_worth(period, Levels(fused=(CHAIN,), held=True)) == 1


def test_a_shareable_chain_in_one_process_is_bounded_only_by_its_serial_neighbours():
    # Stateless and in one process, the fused chain takes several workers at once (dynamic allotment):
    # only the source (5% of the work) is serial.
    assert threads_worth(chain_period(0.9), Levels(fused=(CHAIN,))) == 19
    assert threads_worth(chain_period(0.9, source_busy=0.0, sink_busy=0.0), Levels(fused=(CHAIN,))) is None


def test_a_serial_unit_beside_as_much_other_work_is_worth_two_threads():
    # A coroutine-like serial source busy as long as the held chain: two tasks can run at once.
    period = chain_period(0.45, source_busy=0.45)
    assert threads_worth(period, Levels(fused=(CHAIN,), held=True)) == 2


def test_an_idle_period_bounds_nothing():
    assert threads_worth(chain_period(0.0, source_busy=0.0, sink_busy=0.0), Levels(held=True)) is None


def test_trend_does_not_probe_a_second_thread_for_one_dominant_serial_unit():
    period = chain_period(0.9)
    held = Levels(threads=(1, 1), fused=(CHAIN,), held=True)
    controller = TrendController()
    for _ in range(8):
        assert controller.decide(period, held, MACHINE) == []
    # The same work shareable in one process: IBM's minimum-level rule explores upward.
    [up] = TrendController().decide(period, Levels(threads=(1,), fused=(CHAIN,)), MACHINE)
    assert up.threads == 2


def test_utilization_does_not_add_a_thread_for_one_dominant_serial_unit():
    period = chain_period(0.95)
    assert UtilizationController().decide(period, Levels(threads=(1, 1), fused=(CHAIN,), held=True), MACHINE) == []
    assert UtilizationController().decide(period, Levels(threads=(1,), fused=(CHAIN,)), MACHINE)


def test_a_level_already_above_the_bound_is_not_forced_down_by_it():
    # Four threads chosen on measured throughput: IBM's rules (and the GIL's) decide about going down, as
    # they would with no bound at all.
    period = workers_period(4, busy_each=0.9, cpu_each=0.9, tuples=40_000)
    held, shareable = Levels(threads=(4,), held=True), Levels(threads=(4,))
    assert threads_worth(period, held) == 1 and threads_worth(period, shareable) > 4
    assert TrendController().decide(period, held, MACHINE) == TrendController().decide(period, shareable, MACHINE)
