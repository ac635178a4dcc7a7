"""DS2 replica sizing: a chain with one slow operator gets the replicas it needs in one step."""

from __future__ import annotations

from dataclasses import replace

import pytest
from elastic_snapshots import chain_period, load_periods, op, replicated_period, simulated_chain

from elastream.elastic.controller import Machine
from elastream.elastic.ds2 import REPEAT_PERIODS, SHRINK_PERIODS, DS2Controller, ds2_instances, input_targets, source_rate
from elastream.elastic.view import flow_view
from elastream.metrics.period import PeriodStats, WorkerPeriod
from elastream.runtime.decisions import HotKey, Levels, SetReplicas

EIGHT_CORES = Machine(cores=8, cpu_percent=40.0)
COSTS = {"parse": 10e-6, "slow": 400e-6, "fmt": 10e-6}


def slow_chain_limited_by(source_true_rate: float) -> PeriodStats:
    """The slow operator (400 µs a tuple) at one instance holds the chain to 2,500/s; the source could send more.

    The source was busy 1/source_true_rate per tuple and back-pressured the rest of the period.
    """
    period = chain_period(COSTS, rate=2500.0)
    src = period.operators["src"]
    busy = 2500 / source_true_rate
    ops = {**period.operators, "src": replace(src, busy_s=busy, write_blocked_s=1.0 - busy)}
    return replace(period, operators=ops)


def test_ds2_sizes_the_slow_operator_of_a_chain_in_one_step():
    decisions = DS2Controller().decide(slow_chain_limited_by(5000.0), Levels(threads=(2,)), EIGHT_CORES)
    assert [(d.operator, d.count) for d in decisions] == [("slow", 2)]
    assert "bottleneck" in decisions[0].reason and "DS2" in decisions[0].reason


def with_workers(period: PeriodStats, cpu_s: float) -> PeriodStats:
    """``period`` run by two processes' threads that each used ``cpu_s`` of it."""
    span = period.period_s
    workers = tuple(WorkerPeriod(index=i, busy_s=span, cpu_s=cpu_s, utilisation=1.0, alive_s=span) for i in (0, 1))
    return replace(period, workers=workers)


def test_with_every_process_started_a_replica_waits_for_a_second_period_with_cpu_to_spare():
    two = Levels(threads=(1, 1))
    short = slow_chain_limited_by(5000.0)
    controller = DS2Controller()
    assert controller.decide(short, two, EIGHT_CORES) == []                              # one dip: a pause?
    assert controller.decide(with_workers(short, short.period_s), two, EIGHT_CORES) == []  # full: count again
    assert controller.decide(with_workers(short, 0.5 * short.period_s), two, EIGHT_CORES) == []
    grown = controller.decide(short, two, EIGHT_CORES)                                  # a second in a row
    assert [(d.operator, d.count) for d in grown] == [("slow", 2)]
    assert DS2Controller().decide(short, Levels(threads=(1, 1), held=True), EIGHT_CORES) != []  # one held: at once


def test_with_every_process_started_a_period_after_a_change_of_load_is_no_evidence_of_room():
    two = Levels(threads=(1, 1))
    short, before = slow_chain_limited_by(5000.0), slow_chain_limited_by(5000.0)
    before = replace(before, operators={name: replace(o, tuples_in=o.tuples_in * 3, tuples_out=o.tuples_out * 3)
                                        for name, o in before.operators.items()})
    controller = DS2Controller()
    assert controller.decide(before, two, EIGHT_CORES) == []
    assert controller.decide(short, two, EIGHT_CORES) == []     # a third of the throughput: old tuples draining?
    assert controller.decide(short, two, EIGHT_CORES) == []     # settled: one period with room
    grown = controller.decide(short, two, EIGHT_CORES)          # two settled periods with room
    assert [(d.operator, d.count) for d in grown] == [("slow", 2)]


@pytest.mark.parametrize(("source_rate", "replicas"), [(5000.0, 2), (7400.0, 3), (10000.0, 4)])
def test_ds2_replicas_follow_the_rate_the_sources_can_send(source_rate, replicas):
    decisions = DS2Controller().decide(slow_chain_limited_by(source_rate), Levels(), EIGHT_CORES)
    assert [(d.operator, d.count) for d in decisions] == [("slow", replicas)]


def test_once_sized_the_chain_needs_no_further_step():
    controller = DS2Controller()
    [first] = controller.decide(slow_chain_limited_by(5000.0), Levels(), EIGHT_CORES)
    after = replicated_period("slow", first.count, rate=5000.0, cost_s=400e-6)   # nothing congested any more
    assert controller.decide(after, Levels(replicas={"slow": first.count}), EIGHT_CORES) == []


def test_ds2_never_asks_for_more_replicas_than_the_cores():
    decisions = DS2Controller().decide(slow_chain_limited_by(1e6), Levels(), Machine(cores=2, cpu_percent=90.0))
    assert [(d.operator, d.count) for d in decisions] == [("slow", 2)]


def test_ds2_takes_replicas_back_when_the_load_stays_low_for_a_few_periods():
    light = replicated_period("slow", 4, rate=1000.0, cost_s=400e-6)    # needs 0.4 of one instance
    controller = DS2Controller()
    rounds = [controller.decide(light, Levels(replicas={"slow": 4}), EIGHT_CORES) for _ in range(SHRINK_PERIODS)]
    assert rounds[:-1] == [[]] * (SHRINK_PERIODS - 1)
    assert [(d.operator, d.count) for d in rounds[-1]] == [("slow", 1)]
    assert "more replicas than its load needs" in rounds[-1][0].reason


def test_one_low_period_between_normal_ones_takes_no_replica_back():
    controller = DS2Controller()
    light = replicated_period("slow", 2, rate=1000.0, cost_s=400e-6)
    steady = replicated_period("slow", 2, rate=4000.0, cost_s=400e-6)
    for period in (light, steady, light, steady, light):
        assert controller.decide(period, Levels(replicas={"slow": 2}), EIGHT_CORES) == []


def test_ds2_keeps_replicas_a_steady_load_needs():
    steady = replicated_period("slow", 2, rate=4000.0, cost_s=400e-6)   # needs 1.6 instances
    assert DS2Controller().decide(steady, Levels(replicas={"slow": 2}), EIGHT_CORES) == []


def test_rates_to_sustain_go_from_the_sources_downwards_through_selectivities():
    ops = {"src": op("src", "source", n=1000, busy=0.001, sent={"keep_half": 1000}),
           "keep_half": op("keep_half", n=1000, out=500, busy=0.001, sent={"slow": 500}),
           "slow": op("slow", n=500, busy=0.5, sent={"sink": 500}),
           "sink": op("sink", "sink", n=500, out=0, busy=0.001)}
    view = flow_view(PeriodStats(start_s=0.0, period_s=1.0, operators=ops))
    assert source_rate(view.units["src"], 1.0) == 1000.0        # not back-pressured: what it sent
    assert input_targets(view) == {"keep_half": 1000.0, "slow": 500.0, "sink": 500.0}
    sizing = ds2_instances(view, EIGHT_CORES, {})
    assert sizing["slow"].true_rate == pytest.approx(1000.0) and sizing["slow"].instances == pytest.approx(0.5)


def test_recorded_chain_replicates_the_slow_operator_only():
    found = [[(d.operator, d.count) for d in DS2Controller().decide(p, Levels(threads=(2,)),
                                                                   Machine(cores=2, cpu_percent=95.0))]
             for p in load_periods("chain_one_slow_unfused.json")]
    assert all(decisions in ([("slow", 2)], []) for decisions in found)    # [] once the source has ended
    assert found.count([("slow", 2)]) >= len(found) // 2


def test_recorded_fused_chain_is_replicated_as_one_unit_by_its_first_operator():
    levels = Levels(threads=(2,), fused=(("parse", "slow", "fmt"),))
    decisions = DS2Controller().decide(load_periods("chain_one_slow_fused.json")[3], levels,
                                       Machine(cores=2, cpu_percent=95.0))
    assert [(d.operator, d.count) for d in decisions] == [("parse", 2)]


def test_a_hot_key_group_is_named_once_and_gets_no_more_replicas():
    skewed = (900,) + (10,) * 10
    congested = replicated_period("sum", 2, rate=2000.0, cost_s=900e-6, split_wb=0.8, load=skewed)
    controller = DS2Controller()
    first = controller.decide(congested, Levels(replicas={"sum": 2}), EIGHT_CORES)
    assert [type(d) for d in first] == [HotKey]
    assert (first[0].operator, first[0].group, first[0].share) == ("sum", 0, 0.9)
    assert "more replicas cannot help" in first[0].reason
    assert controller.decide(congested, Levels(replicas={"sum": 2}), EIGHT_CORES) == []   # named once
    spread = replicated_period("sum", 2, rate=2000.0, cost_s=900e-6, split_wb=0.8, load=(100,) * 10)
    grown = controller.decide(spread, Levels(replicas={"sum": 2}), EIGHT_CORES)
    assert [type(d) for d in grown] == [SetReplicas] and grown[0].count > 2


def test_a_fused_chain_the_levels_do_not_name_gets_no_misdirected_replicas():
    period = load_periods("chain_one_slow_fused.json")[3]        # its head is congested, its members share busy time
    assert DS2Controller().decide(period, Levels(threads=(2,)), Machine(cores=2, cpu_percent=95.0)) == []


def test_replicas_go_above_the_cores_only_for_operators_seen_waiting_off_the_cpu_on_a_measured_machine():
    waiting = slow_chain_limited_by(1e6)
    slow = waiting.operators["slow"]
    waiting = replace(waiting, operators={**waiting.operators, "slow": replace(slow, cpu_s=slow.busy_s / 20)})
    def count(machine):
        return [d.count for d in DS2Controller().decide(waiting, Levels(), machine)]
    assert count(Machine(cores=2, cpu_percent=30.0)) == [8]        # blocking I/O: up to the thread cap
    assert count(Machine(cores=2, cpu_percent=0.0)) == [2]         # CPU not measured: the cores
    assert count(Machine(cores=2, cpu_percent=95.0)) == [2]        # saturated machine: the cores


def test_a_proposal_not_in_force_yet_is_not_repeated_every_period():
    controller, congested = DS2Controller(), slow_chain_limited_by(5000.0)
    counts = [[d.count for d in controller.decide(congested, Levels(), EIGHT_CORES)] for _ in range(REPEAT_PERIODS + 1)]
    assert counts == [[2]] + [[]] * (REPEAT_PERIODS - 1) + [[2]]     # asked again once the wait is over


def run_closed_loop(controller: DS2Controller, costs: dict[str, float], instances: dict[str, int],
                    periods: int, source_rate: float = 10_000.0) -> list[dict[str, int]]:
    """Replica counts in force during each period, the plant answering the controller's decisions."""
    trace = []
    for _ in range(periods):
        trace.append(dict(instances))
        period = simulated_chain(costs, instances, source_rate)
        for d in controller.decide(period, Levels(replicas={k: v for k, v in instances.items() if v > 1}), EIGHT_CORES):
            assert isinstance(d, SetReplicas)
            instances[d.operator] = d.count
    return trace


def test_replica_sizing_converges_within_three_periods_of_each_change_and_holds_still_between():
    controller, instances = DS2Controller(), {"parse": 1, "slow": 1, "fmt": 1}
    phases = [{"parse": 20e-6, "slow": 200e-6, "fmt": 20e-6},      # needs 2 replicas of slow at 10,000/s
              {"parse": 20e-6, "slow": 480e-6, "fmt": 20e-6},      # its cost rises: 5
              {"parse": 20e-6, "slow": 80e-6, "fmt": 20e-6}]       # and falls: 1
    wanted = [2, 5, 1]
    for costs, want in zip(phases, wanted):
        trace = run_closed_loop(controller, costs, instances, periods=12)
        slow = [t["slow"] for t in trace]
        settled = next(i for i in range(len(slow)) if slow[i:] == [want] * (len(slow) - i))
        assert settled <= 3, slow
        assert all(t["parse"] == 1 and t["fmt"] == 1 for t in trace)


def test_two_busy_operators_of_a_chain_are_sized_in_one_step():
    costs = {"parse": 20e-6, "busy1": 300e-6, "busy2": 300e-6, "fmt": 20e-6}
    trace = run_closed_loop(DS2Controller(), costs, {name: 1 for name in costs}, periods=6)
    assert trace[1] == trace[-1] == {"parse": 1, "busy1": 3, "busy2": 3, "fmt": 1}
