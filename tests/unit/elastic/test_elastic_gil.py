"""GIL-awareness: threads that add busy time but no CPU time go down, processes are proposed instead."""

from __future__ import annotations

import pytest
from elastic_snapshots import load_about, load_periods, workers_period

from elastream.elastic.controller import Machine
from elastream.elastic.gil import GilGuard, Regime, read_gil
from elastream.elastic.trend import TrendController
from elastream.elastic.utilization import UtilizationController
from elastream.runtime.decisions import Levels, SetProcesses, SetThreads

TWO_CORES = Machine(cores=2, cpu_percent=55.0)


def pure_python_at(threads: int):
    """Every thread busy all period, all of them together on about one core: the GIL serialises them."""
    return workers_period(threads, busy_each=1.0, cpu_each=1.0 / threads, tuples=5000)


@pytest.mark.parametrize("controller", [TrendController, UtilizationController])
def test_a_pure_python_flow_at_4_threads_goes_down_to_1_and_asks_for_processes(controller):
    decisions = controller().decide(pure_python_at(4), Levels(threads=(4,)), TWO_CORES)
    threads = [d for d in decisions if isinstance(d, SetThreads)]
    processes = [d for d in decisions if isinstance(d, SetProcesses)]
    assert [(d.process, d.threads) for d in threads] == [(0, 1)]
    assert "GIL" in threads[0].reason and "4.0 threads busy on 1.00 cores" in threads[0].reason
    assert [d.count for d in processes] == [2]
    assert "processes" in processes[0].reason


@pytest.mark.parametrize("controller", [TrendController, UtilizationController])
def test_after_going_down_for_the_gil_the_level_stays_down(controller):
    control, level = controller(), 4
    trace = []
    for _ in range(12):
        trace.append(level)
        period = pure_python_at(level) if level > 1 else workers_period(1, busy_each=1.0, cpu_each=1.0, tuples=5000)
        for d in control.decide(period, Levels(threads=(level,)), TWO_CORES):
            if isinstance(d, SetThreads):
                level = d.threads
    assert trace[1:] == [1] * 11


def test_readings_tell_cpu_gil_and_waiting_apart():
    assert read_gil(workers_period(2, 1.0, 1.0, 10)).regime is Regime.CPU
    assert read_gil(workers_period(4, 1.0, 0.25, 10)).regime is Regime.GIL_BOUND
    waiting = workers_period(4, 1.0, 0.05, 10)
    assert read_gil(waiting, Machine(cores=2, cpu_percent=20.0)).regime is Regime.WAITING
    # the same reading on a saturated (or unmeasured) machine: a GIL-bound process starved of CPU looks alike
    assert read_gil(waiting, Machine(cores=2, cpu_percent=100.0)).regime is Regime.GIL_BOUND
    assert read_gil(waiting).regime is Regime.GIL_BOUND
    assert read_gil(workers_period(1, 1.0, 0.3, 10)).regime is Regime.CPU  # one thread: no evidence


def test_the_process_whose_threads_pile_up_on_the_gil_speaks_for_the_level():
    """Process 0 at two threads busy on one core beside a worker at one thread (a unit moved whole there):
    the mean of the two (1.5 threads on one core) would read as CPU-bound."""
    from elastream.metrics.period import PeriodStats, WorkerPeriod

    workers = (WorkerPeriod(0, busy_s=0.95, cpu_s=0.5, utilisation=0.95, process=0),
               WorkerPeriod(1, busy_s=0.95, cpu_s=0.5, utilisation=0.95, process=0),
               WorkerPeriod(2, busy_s=1.0, cpu_s=1.0, utilisation=1.0, process=1))
    reading = read_gil(PeriodStats(0.0, 1.0, workers=workers))
    assert reading.regime is Regime.GIL_BOUND and reading.busy_threads == pytest.approx(1.9)


def test_operators_that_wait_with_the_gil_released_may_go_above_the_cores_while_throughput_rises():
    controller = UtilizationController()
    machine = Machine(cores=2, cpu_percent=20.0, max_threads=6)
    level, trace = 2, []
    for _ in range(8):
        trace.append(level)
        # blocking I/O: every thread busy (waiting), little CPU, throughput grows with the threads up to 4
        period = workers_period(level, busy_each=1.0, cpu_each=0.03, tuples=1000 * min(level, 4))
        for d in controller.decide(period, Levels(threads=(level,)), machine):
            level = d.threads
    assert trace == [2, 3, 4, 5, 4, 4, 4, 4]      # above the 2 cores while it paid; 5 did not beat 4


def test_the_gil_guard_holds_its_cap_for_a_while_then_lets_go():
    guard = GilGuard(hold_periods=3)
    reading = read_gil(workers_period(2, 1.0, 1.0, 10))
    guard.hold(1)
    assert [guard.ceiling(reading, Machine(cores=4)) for _ in range(4)] == [1, 1, 4, 4]


def test_recorded_four_threads_with_one_busy_goes_down():
    periods = load_periods("pure_python_4_threads.json")
    for controller in (TrendController(), UtilizationController()):
        decisions = controller.decide(periods[2], Levels(threads=(4,)), TWO_CORES)
        assert [d.threads for d in decisions if isinstance(d, SetThreads)] == [2]   # at most the cores


@pytest.mark.parametrize("controller", [TrendController, UtilizationController])
def test_recorded_pure_python_pipeline_at_4_threads_goes_down_to_1(controller):
    name = "pure_python_pipeline_4_threads.json"
    periods, cpu = load_periods(name), load_about(name)["machine_cpu_percent"]
    middle = len(periods) // 2
    decisions = controller().decide(periods[middle], Levels(threads=(4,)), Machine(cores=2, cpu_percent=cpu[middle]))
    assert [(d.process, d.threads) for d in decisions if isinstance(d, SetThreads)] == [(0, 1)]
    assert read_gil(periods[middle]).busy_threads > 2      # several threads were busy


def test_no_process_is_proposed_while_the_machine_cpu_is_saturated():
    decisions = TrendController().decide(pure_python_at(4), Levels(threads=(4,)), Machine(cores=2, cpu_percent=97.0))
    assert [type(d) for d in decisions] == [SetThreads]
