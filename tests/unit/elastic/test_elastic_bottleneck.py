"""Bottleneck detection by write-blocked ratio (C-Stream Algorithm 9) over the flow's logical units."""

from __future__ import annotations

from elastic_snapshots import chain_period, load_periods, op, replicated_period

from elastream.elastic.bottleneck import detect_bottleneck, detect_bottlenecks
from elastream.elastic.view import flow_view, logical_name, period_throughput
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Levels

CHAIN = {"a": 20e-6, "b": 30e-6, "slow": 500e-6, "c": 20e-6}


def test_detection_picks_the_one_slow_operator_of_a_chain():
    view = flow_view(chain_period(CHAIN, rate=2000.0))
    assert [u.name for u in detect_bottlenecks(view)] == ["slow"]
    assert detect_bottleneck(view).name == "slow"
    # upstream of it: input and output congested (back-pressure), so not a bottleneck
    assert view.units["b"].input_congestion == 1.0 and view.units["b"].output_congestion == 1.0


def test_nothing_congested_means_no_bottleneck():
    assert detect_bottleneck(flow_view(chain_period(CHAIN, rate=500.0, slow_wait=False))) is None


def test_recorded_chain_detection_picks_the_slow_operator_whenever_anything_is_congested():
    found = [[u.name for u in detect_bottlenecks(flow_view(p, Levels(threads=(2,))))]
             for p in load_periods("chain_one_slow_unfused.json")]
    assert all(names in (["slow"], []) for names in found)
    assert found.count(["slow"]) >= len(found) // 2


def test_a_fused_chain_is_one_candidate_named_by_its_first_operator():
    periods = load_periods("chain_one_slow_fused.json")
    view = flow_view(periods[3], Levels(threads=(2,), fused=(("parse", "slow", "fmt"),)))
    assert list(view.units) == ["src", "parse", "out"]
    assert view.units["parse"].members == ("parse", "slow", "fmt")
    assert [u.name for u in detect_bottlenecks(view)] == ["parse"]


def test_a_replicated_operator_is_a_bottleneck_while_its_split_waits_on_its_replicas():
    still_short = flow_view(replicated_period("slow", 2, rate=2000.0, cost_s=900e-6, split_wb=0.6))
    unit = still_short.units["slow"]
    assert (unit.instances, unit.processed, unit.tuples_in) == (2, 2000, 2000)   # tuples, not pieces
    assert [u.name for u in detect_bottlenecks(still_short)] == ["slow"]
    held_back = flow_view(replicated_period("slow", 2, rate=2000.0, cost_s=900e-6, split_wb=0.6, merge_wb=0.5))
    assert detect_bottlenecks(held_back) == []          # its merge waits downstream: back-pressure, not slowness


def test_only_single_input_single_output_stateless_or_partitioned_units_are_candidates():
    ops = {"src": op("src", "source", n=100, wb=1.0, sent={"state": 100}),
           "state": op("state", "stateful", n=100, busy=0.9, sent={"sink": 100}),
           "sink": op("sink", "sink", n=100, out=0)}
    view = flow_view(PeriodStats(start_s=0.0, period_s=1.0, operators=ops))
    assert view.units["state"].input_congestion == 1.0
    assert detect_bottlenecks(view) == []


def test_statistics_names_fold_into_the_operator_they_belong_to():
    assert [logical_name(n) for n in ("sum#0", "sum#12", "sum#split", "sum#merge", "parse")] == \
        ["sum", "sum", "sum", "sum", "parse"]


def test_throughput_counts_the_operators_the_user_wrote():
    plain = flow_view(chain_period(CHAIN, rate=1000.0))
    assert plain.throughput() == 6 * 1000          # source, four operators, sink
    replicated = flow_view(replicated_period("slow", 3, rate=1000.0, cost_s=1e-4))
    assert replicated.throughput() == 3 * 1000     # source, slow (not its split, replicas, merge), sink


def test_the_thread_controllers_throughput_equals_the_views():
    for period in (chain_period(CHAIN, rate=1000.0), replicated_period("slow", 3, rate=1000.0, cost_s=1e-4),
                   *load_periods("chain_one_slow_unfused.json")[:3]):
        assert period_throughput(period) == flow_view(period).throughput()


def test_a_finite_input_waiting_in_the_buffers_is_a_bottleneck_too():
    """The source has sent everything and waits on nothing, but 1,500 tuples (3 s of work) wait at the unit."""
    from dataclasses import replace

    from elastream.elastic.bottleneck import is_backlogged
    from elastream.elastic.ds2 import DS2Controller
    from elastream.elastic.controller import Machine
    from elastream.runtime.decisions import SetReplicas

    period = PeriodStats(start_s=0.0, period_s=0.5, operators={
        "src": op("src", "source", n=0, out=0, busy=0.0, sent={"work": 0}),
        "work": replace(op("work", n=250, busy=0.5, sent={"out": 250}), queue_length=1500),
        "out": op("out", "sink", n=250, busy=0.001)})
    view = flow_view(period)
    assert view.units["work"].backlog == 1500 and view.units["work"].input_congestion == 0.0
    assert is_backlogged(view.units["work"]) and [u.name for u in detect_bottlenecks(view)] == ["work"]
    decisions = DS2Controller().decide(period, Levels(replicas={"work": 1}), Machine(cores=2))
    assert [(d.operator, d.count) for d in decisions if isinstance(d, SetReplicas)] == [("work", 2)]
    assert "1,500 tuples wait at its input" in decisions[0].reason
    light = replace(period, operators={**period.operators, "work": replace(period.operators["work"], queue_length=100)})
    assert detect_bottlenecks(flow_view(light)) == []  # 0.2 s of work waiting: it keeps up


def test_a_unit_lighter_than_a_hop_between_processes_gets_no_replica_there():
    """Backlogged either way; at 1 µs of CPU per tuple a replica in another process would cost more than it gives."""
    from dataclasses import replace

    from elastream.elastic.controller import Machine
    from elastream.elastic.ds2 import MIN_REMOTE_COST_S, DS2Controller

    def period(tuples: int, busy: float) -> PeriodStats:
        return PeriodStats(start_s=0.0, period_s=0.5, operators={
            "src": op("src", "source", n=0, out=0, busy=0.0, sent={"work": 0}),
            "work": replace(op("work", n=tuples, busy=busy, sent={"out": tuples}), queue_length=4 * tuples),
            "out": op("out", "sink", n=tuples, busy=0.001)})

    light, heavy = period(250_000, 0.25), period(10_000, 0.45)
    assert flow_view(light).units["work"].cpu_per_tuple_s < MIN_REMOTE_COST_S
    assert DS2Controller().decide(light, Levels(replicas={"work": 1}), Machine(cores=2)) == []
    [grow] = DS2Controller().decide(heavy, Levels(replicas={"work": 1}), Machine(cores=2))
    assert (grow.operator, grow.count) == ("work", 2)
