"""The trend thread controller (IBM §4.2): settles on the peak of the throughput curve, re-explores on a change of load."""

from __future__ import annotations

from dataclasses import replace

from elastic_snapshots import workers_period

from elastream.elastic.controller import Machine
from elastream.elastic.trend import TrendController, is_start_up
from elastream.runtime.decisions import Levels, SetThreads

MACHINE = Machine(cores=8, cpu_percent=30.0)


def period_at(level: int, curve: dict[int, float]):
    """One period at ``level`` threads, every thread busy on its own core, ``curve[level]`` tuples handled."""
    return workers_period(level, busy_each=0.9, cpu_each=0.9, tuples=int(curve[level]))


def run(controller: TrendController, curve: dict[int, float], level: int, periods: int,
        machine: Machine = MACHINE) -> list[int]:
    """Drive the controller over ``periods`` periods of ``curve``; the level during each period."""
    trace = []
    for _ in range(periods):
        trace.append(level)
        decisions = controller.decide(period_at(level, curve), Levels(threads=(level,)), machine)
        for d in decisions:
            assert isinstance(d, SetThreads) and d.reason
            level = d.threads
    return trace


def changes(trace: list[int]) -> int:
    return sum(1 for a, b in zip(trace, trace[1:]) if a != b)


PEAK_AT_3 = {1: 1000, 2: 1800, 3: 2400, 4: 2300, 5: 2000, 6: 1800, 7: 1700, 8: 1600}
PEAK_AT_5 = {1: 1500, 2: 2800, 3: 3800, 4: 4600, 5: 5200, 6: 5000, 7: 4700, 8: 4500}


def test_trend_settles_on_the_peak_of_the_throughput_curve():
    trace = run(TrendController(), PEAK_AT_3, level=1, periods=30)
    assert trace[-10:] == [3] * 10
    assert max(trace) == 4           # it looked one level past the peak, no further
    assert changes(trace[10:]) == 0


def test_trend_re_explores_after_a_change_of_load_and_settles_on_the_new_peak():
    controller = TrendController()
    first = run(controller, PEAK_AT_3, level=1, periods=20)
    assert first[-1] == 3
    second = run(controller, PEAK_AT_5, level=first[-1], periods=30)
    assert second[-10:] == [5] * 10
    assert changes(second[-10:]) == 0


def test_trend_does_not_add_threads_while_the_machine_cpu_is_above_80_percent():
    busy = Machine(cores=8, cpu_percent=95.0)
    trace = run(TrendController(), PEAK_AT_5, level=1, periods=10, machine=busy)
    assert set(trace) == {1}


def test_trend_never_goes_above_the_cores_for_cpu_bound_threads():
    rising = {n: 1000.0 * n for n in range(1, 9)}
    trace = run(TrendController(), rising, level=1, periods=20, machine=Machine(cores=2, cpu_percent=10.0))
    assert max(trace) == 2 and trace[-5:] == [2] * 5


def test_a_level_above_the_cores_comes_down_to_the_cores_at_once():
    decisions = TrendController().decide(period_at(6, PEAK_AT_5), Levels(threads=(6,)), Machine(cores=2))
    assert [d.threads for d in decisions] == [2]
    assert "above the 2" in decisions[0].reason


def test_update_thread_level_follows_fig_7_rules():
    controller = TrendController()
    # level 1, nothing trusted above: rule 3, up
    assert controller.update_thread_level(1, 100.0, ceiling=4)[0] == 2
    # level 2 better than 1 by more than SENS, nothing trusted above: rule 1, up
    assert controller.update_thread_level(2, 150.0, ceiling=4)[0] == 3
    # level 3 no better than 2 (within SENS): rule 5, down
    level, why = controller.update_thread_level(3, 152.0, ceiling=4)
    assert level == 2 and "no upward trend" in why
    # back at 2: better than 1, level 3 trusted and not better: stays (the peak)
    assert controller.update_thread_level(2, 150.0, ceiling=4) == (2, "at the peak: better than below, nothing better above")


def test_every_thread_level_of_every_process_moves_together():
    levels = Levels(threads=(1, 1))
    busy = workers_period(2, busy_each=0.9, cpu_each=0.9, tuples=3000)  # each process's one thread busy
    decisions = TrendController().decide(busy, levels, MACHINE)
    assert sorted((d.process, d.threads) for d in decisions) == [(0, 2), (1, 2)]


def test_a_slow_flow_is_measured_over_several_periods_before_the_level_moves():
    controller = TrendController()
    slow = {1: 600, 2: 1100}          # 1,800 tuples handled a period at level 1: a window of several periods
    trace = run(controller, slow, level=1, periods=4)
    assert trace == [1, 1, 1, 2]


def test_threads_that_idle_most_of_the_period_get_no_company():
    """A light load: one thread busy 60% of the period, not saturated. IBM's minimum-level rule would explore upward;
    another thread would only wait too (and take turns at the GIL), so the level stays."""
    light = workers_period(1, busy_each=0.6, cpu_each=0.6, tuples=1000)
    assert TrendController().decide(light, Levels(threads=(1,)), MACHINE) == []
    assert TrendController().decide(period_at(1, {1: 6000}), Levels(threads=(1,)), MACHINE)  # busy: explores


def test_a_unit_moved_whole_into_another_process_is_a_new_curve():
    """A move keeps the unit's replica count: the records must still be untrusted, or the throughput the move
    brought would read as the thread level's doing."""
    controller = TrendController()
    before = Levels(threads=(2, 2), replicas={"b0": 1}, held=True)
    for _ in range(8):
        controller.decide(period_at(2, PEAK_AT_5 | {2: 6000}), before, MACHINE)
    assert controller.records[2].trusted
    moved = Levels(threads=(2, 2), replicas={"b0": 1}, held=True, moved={"b0": 1})
    controller.decide(period_at(2, {2: 100}), moved, MACHINE)
    assert not any(rec.trusted for rec in controller.records.values())


def test_a_runs_first_period_measures_no_level():
    """Its threads start during it and its queues fill from empty: recorded as level 1's, its throughput would
    be compared with every later level's."""
    steady = period_at(1, {1: 6000})
    workers = tuple(replace(w, alive_s=0.85) for w in steady.workers)       # started 150 ms into the period
    first = replace(steady, workers=workers)
    controller = TrendController()
    assert is_start_up(first) and controller.decide(first, Levels(threads=(1,)), MACHINE) == []
    assert controller.records == {}
    later = replace(first, start_s=1.0)
    assert not is_start_up(later) and controller.decide(later, Levels(threads=(1,)), MACHINE)  # explores


def test_a_change_of_load_met_at_a_level_with_no_record_is_seen_and_that_level_measured_again():
    """IBM compares a level only with its own past. On IBM Fig. 10 (GIL released) the step up to 2 threads met
    the cost per tuple falling 8-fold: 7 times level 1's throughput, read as the second thread's doing, held
    2 threads for 10 periods. One thread more does at most twice the work of one, give or take LOAD_CHANGE."""
    controller = TrendController()
    assert controller.update_thread_level(1, 16_000.0, ceiling=2)[0] == 2       # the lowest level: try 2
    level, why = controller.update_thread_level(2, 117_000.0, ceiling=2)        # the load changed meanwhile
    assert level == 2 and "load changed" in why
    assert not any(rec.trusted for rec in controller.records.values())
    level, why = controller.update_thread_level(2, 110_000.0, ceiling=2)        # measured again
    assert level == 1 and "nothing trusted below" in why
    assert controller.update_thread_level(1, 117_000.0, ceiling=2)[0] == 1      # 2 did no better: stays
    assert controller.update_thread_level(1, 118_000.0, ceiling=2)[0] == 1


def test_a_level_that_does_what_its_threads_can_is_not_a_change_of_load():
    controller = TrendController()
    controller.update_thread_level(1, 16_000.0, ceiling=4)
    assert controller.update_thread_level(2, 36_000.0, ceiling=4)[0] == 3       # 2.25x: within 2 threads' reach
    assert controller.records[1].trusted
    # down to a level with no record: one thread fewer of 3 loses at most a third of the work, give or take
    controller = TrendController()
    for level, thput in ((1, 10_000.0), (2, 19_000.0), (3, 30_000.0)):
        controller.update_thread_level(level, thput, ceiling=3)
    assert "load changed" in controller.update_thread_level(3, 45_000.0, ceiling=3)[1]
    assert controller.update_thread_level(3, 45_000.0, ceiling=3)[0] == 2       # nothing trusted below
    assert "load changed" in controller.update_thread_level(2, 20_000.0, ceiling=3)[1]   # < 2/3 x 0.8 of 45k
    controller.update_thread_level(2, 20_000.0, ceiling=3)                      # measured again: recorded
    assert controller.records[2].trusted and controller.records[2].first_thput == 20_000.0
