"""The utilisation thread controller (C-Stream §4.1): ±1 thread per period against U_l and U_h."""

from __future__ import annotations

import pytest
from elastic_snapshots import workers_period

from elastream.elastic.controller import Machine, create_controller
from elastream.elastic.utilization import UtilizationController, mean_utilisation
from elastream.runtime.decisions import Levels, SetThreads

MACHINE = Machine(cores=4, cpu_percent=30.0)


def decide(u: float, level: int, machine: Machine = MACHINE, controller: UtilizationController | None = None):
    """Decisions after a period where each of ``level`` threads was busy ``u`` of the time, on its own core."""
    controller = controller or UtilizationController()
    period = workers_period(level, busy_each=u, cpu_each=u, tuples=1000)
    return controller.decide(period, Levels(threads=(level,)), machine)


@pytest.mark.parametrize(("u", "level", "after"), [
    (0.99, 1, 2),     # U > U_h: one thread more
    (0.99, 3, 4),
    (0.50, 3, 2),     # U < U_l: one thread less
    (0.80, 2, 1),
    (0.92, 2, 2),     # U_l <= U <= U_h: unchanged
    (0.30, 1, 1),     # never below the minimum level
    (0.99, 4, 4),     # never above the cores
])
def test_utilization_steps_one_thread_as_c_stream_4_1_says(u, level, after):
    decisions = decide(u, level)
    assert [d.threads for d in decisions] == ([after] if after != level else [])
    assert all(isinstance(d, SetThreads) and "C-Stream §4.1" in d.reason for d in decisions)


def test_utilization_thresholds_are_configurable():
    controller = UtilizationController(low=0.2, high=0.5)
    assert [d.threads for d in decide(0.6, 2, controller=controller)] == [3]
    assert decide(0.3, 2, controller=controller) == []


def test_utilization_adds_no_thread_while_the_machine_cpu_is_above_80_percent():
    assert decide(0.99, 1, machine=Machine(cores=4, cpu_percent=90.0)) == []


def test_utilization_climbs_one_level_per_period():
    controller = UtilizationController()
    level, trace = 1, []
    for _ in range(6):
        trace.append(level)
        for d in decide(0.99, level, controller=controller):
            level = d.threads
    assert trace == [1, 2, 3, 4, 4, 4]


def test_mean_utilisation_divides_by_the_threads_asked_not_the_workers_listed():
    period = workers_period(4, busy_each=0.5, cpu_each=0.5, tuples=10)   # two of them retired, still listed
    assert mean_utilisation(period, Levels(threads=(4,))) == pytest.approx(0.5)
    assert mean_utilisation(period, Levels(threads=(2,))) == pytest.approx(1.0)


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError, match="low < high"):
        UtilizationController(low=0.9, high=0.8)


def test_the_combined_controller_passes_thresholds_to_its_utilization_controller():
    # C-Stream's adaptation with U_h = 0.90 (Fig. 11's second curve): threads by utilisation beside DS2's replicas.
    controller = create_controller("auto", threads="utilization", thread_options={"low": 0.80, "high": 0.90})
    assert (controller.threads.low, controller.threads.high) == (0.80, 0.90)
    period = workers_period(2, busy_each=0.92, cpu_each=0.92, tuples=1000)
    threads = [d for d in controller.decide(period, Levels(threads=(2,)), MACHINE) if isinstance(d, SetThreads)]
    assert [d.threads for d in threads] == [3]          # 0.92 is above this U_h, within the default's band
    assert decide(0.92, 2) == []
