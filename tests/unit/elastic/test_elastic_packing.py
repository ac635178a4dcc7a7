"""Sizing by what each held process carries (elastic.packing): many light units filling process 0.

C-Stream Fig. 11's shape on ``Runner()``: a source feeding six parallel branches, each
a sixth of the work, all in process 0 with one thread. No unit is short by DS2's
measure and none is busy half the period, yet the process is saturated and a
second one waits idle.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from elastic_snapshots import op

from elastream.elastic.bottleneck import detect_bottlenecks
from elastream.elastic.controller import Machine
from elastream.elastic.ds2 import SHRINK_HEADROOM, DS2Controller, Sizing, ds2_instances
from elastream.elastic.packing import (fits_after, held_loads, lowers_busiest, process_loads, spread_decisions,
                                       unit_needs, whole_moves)
from elastream.elastic.view import FlowView, Unit, flow_view
from elastream.metrics.period import PeriodStats, WorkerPeriod
from elastream.runtime.decisions import Levels, SetReplicas

BRANCHES = [f"b{i}" for i in range(1, 7)]
HELD = Levels(threads=(1, 1), replicas={b: 1 for b in BRANCHES}, held=True)
MACHINE = Machine(cores=2, cpu_percent=50.0)


def unit(name: str) -> Unit:
    """A stateless one-in, one-out unit (a source for "src") of 1,000 tuples a second, 100 us each."""
    return Unit(name=name, members=(name,), kind="source" if name == "src" else "stateless", instances=1,
                tuples_in=1000, tuples_out=1000, processed=1000, busy_s=0.1, cpu_s=0.1, write_blocked_s=0.0,
                read_blocked_s=0.0, input_congestion=0.0, output_congestion=0.0, downstream={}, upstream=(),
                key_group_load=(), handled=1000, backlog=0)


def six_branches(*, worker_busy: float = 0.49, branch_busy: float = 0.075) -> PeriodStats:
    """src → six branches → union → sink over 0.5 s on one thread, 1,000 tuples per branch."""
    each, n = 1000, 6000
    ops = {"src": op("src", "source", n=n, busy=0.01, sent={b: each for b in BRANCHES})}
    for b in BRANCHES:
        ops[b] = op(b, n=each, busy=branch_busy, sent={"union": each})
    ops["union"] = op("union", "stateful", n=n, busy=0.005, sent={"sink": n})
    ops["sink"] = op("sink", "sink", n=n, out=0, busy=0.005)
    worker = WorkerPeriod(index=0, busy_s=worker_busy, cpu_s=worker_busy, utilisation=worker_busy / 0.5)
    return PeriodStats(start_s=0.0, period_s=0.5, operators=ops, workers=(worker,))


def test_no_single_unit_is_short_but_process_0_is_full():
    view = flow_view(six_branches(), HELD)
    assert view.units["src"].starved_s > 0
    assert detect_bottlenecks(view) == []  # no congested port, no unit busy half the period


def test_half_the_branches_move_whole_to_the_held_process_in_one_step():
    decisions = DS2Controller().decide(six_branches(), HELD, MACHINE)
    assert len(decisions) == 3  # process 0 keeps three branches, the source, the union and the sink
    assert all(isinstance(d, SetReplicas) and d.count == 1 and d.replicas == (1,) for d in decisions)
    assert "runs whole in held process 1" in decisions[0].reason


def test_with_two_held_processes_the_branches_move_to_the_least_loaded_one():
    three = Levels(threads=(1, 1, 1), replicas={b: 1 for b in BRANCHES}, held=True)
    decisions = DS2Controller().decide(six_branches(), three, Machine(cores=3, cpu_percent=30.0))
    targets = [d.replicas for d in decisions]
    assert all(isinstance(d, SetReplicas) and d.count == 1 for d in decisions)
    assert sorted(targets) == [(1,), (1,), (2,), (2,)]  # two branches each; process 0 keeps two and the rest
    assert targets[:2] == [(1,), (2,)]                   # in turn, to whichever carries least


def test_no_replica_goes_to_a_worker_already_as_busy_as_process_0():
    """Three branches moved whole: process 0 is over its thread, but the worker is as busy; a replica would only
    move work between the two (and add a split and a merge)."""
    moved = replace(HELD, moved={b: 1 for b in BRANCHES[:3]})
    both_full = tuple(WorkerPeriod(index=p, busy_s=0.49, cpu_s=0.49, utilisation=0.98, process=p) for p in (0, 1))
    view = flow_view(replace(six_branches(branch_busy=0.16), workers=both_full), moved)  # 3 x 0.16 s each
    caps = {b: 2 for b in BRANCHES}
    sizing = ds2_instances(view, MACHINE, caps)
    assert process_loads(view, unit_needs(view, sizing), {b: 1 for b in BRANCHES}, 2, moved.moved)[0] > 1.0
    assert spread_decisions(view, sizing, moved, caps) == []


@pytest.mark.parametrize(("needs", "worth_it"), [((1.0, 1.0), False), ((1.6, 0.3), True)],
                         ids=["worker-as-busy", "worker-light"])
def test_a_grown_replica_must_lower_the_busiest_process(needs, worth_it):
    """IBM Fig. 10's two branches: "b1" left in process 0, "b2" moved whole into the held worker. A second
    replica of "b1" runs in process 1 too: worth it only if the worker has the room."""
    view = FlowView(period_s=1.0, units={name: unit(name) for name in ("src", "b1", "b2")})
    sizing = {name: Sizing(name, 1000.0, 1000.0 / need, need) for name, need in zip(("b1", "b2"), needs)}
    levels = Levels(threads=(1, 1), replicas={"b1": 1, "b2": 1}, held=True, moved={"b2": 1})
    assert lowers_busiest(view, sizing, levels, SetReplicas("b1", 2)) is worth_it
    assert lowers_busiest(view, sizing, replace(levels, held=False), SetReplicas("b1", 2))   # nothing held


def test_keyed_branches_spread_over_the_held_process_instead():
    period = six_branches()
    keyed = {name: replace(o, kind="partitioned") if name in BRANCHES else o for name, o in period.operators.items()}
    decisions = DS2Controller().decide(replace(period, operators=keyed), HELD, MACHINE)
    assert all(isinstance(d, SetReplicas) and d.count == 2 for d in decisions)
    assert len(decisions) >= 5
    assert "process 0 would be busy" in decisions[0].reason


def test_one_unit_carrying_most_of_the_work_is_replicated_not_moved():
    needs = {"src": 0.05, "heavy": 1.6, "light": 0.2}
    view = FlowView(period_s=1.0, units={name: unit(name) for name in ("src", "heavy", "light")})
    levels = Levels(threads=(1, 1), replicas={"heavy": 1, "light": 1}, held=True)
    assert whole_moves(view, needs, {"heavy": 1, "light": 1}, levels, {"heavy": 2, "light": 2}) == []
    assert whole_moves(view, {**needs, "heavy": 0.9, "light": 0.8}, {"heavy": 1, "light": 1}, levels,
                       {"heavy": 2, "light": 2})[0].operator == "heavy"


def test_a_moved_unit_counts_in_its_process_and_keeps_its_one_instance():
    view = FlowView(period_s=1.0, units={})
    needs = {"src": 0.02, **{b: 0.3 for b in BRANCHES}}
    moved = {"b1": 1, "b2": 1, "b3": 1}
    assert process_loads(view, needs, {b: 1 for b in BRANCHES}, 2, moved) == pytest.approx([0.92, 0.9])
    levels = replace(HELD, moved=moved)
    assert levels.working_processes == 2
    assert all(d.operator not in moved for d in DS2Controller().decide(six_branches(), levels, MACHINE))


@pytest.mark.parametrize("period, levels", [
    (six_branches(), replace(HELD, held=False)),                   # no processes held ready
    (six_branches(worker_busy=0.3, branch_busy=0.045), HELD),      # a light load: the source never waits
], ids=["not-held", "light"])
def test_no_spreading_without_a_held_process_or_a_full_one(period, levels):
    assert DS2Controller().decide(period, levels, MACHINE) == []


def spread_period(replica_busy: float, process0_other: float) -> PeriodStats:
    """One second of the six branches at two replicas each: each replica busy ``replica_busy`` s, and
    ``process0_other`` s of other work in process 0 (source, splits, merges, union, sink)."""
    ops = {"src": op("src", "source", n=6000, busy=process0_other, sent={f"{b}#split": 1000 for b in BRANCHES})}
    for b in BRANCHES:
        ops[f"{b}#split"] = op(f"{b}#split", "stateful", n=1000, busy=0.0, sent={f"{b}#0": 500, f"{b}#1": 500})
        for r in (0, 1):
            ops[f"{b}#{r}"] = op(f"{b}#{r}", n=500, busy=replica_busy, sent={f"{b}#merge": 500})
        ops[f"{b}#merge"] = op(f"{b}#merge", "stateful", n=1000, busy=0.0, sent={"sink": 1000})
    ops["sink"] = op("sink", "sink", n=6000, out=0, busy=0.0)
    return PeriodStats(start_s=0.0, period_s=1.0, operators=ops, workers=())


def test_held_loads_put_replica_r_in_process_r():
    loads, replicas = held_loads(spread_period(0.1, 0.2), 2)
    assert loads == pytest.approx([0.8, 0.6])
    assert replicas["b1"] == pytest.approx([0.1, 0.1])


def test_loads_split_each_units_need_over_its_replicas_processes():
    view = FlowView(period_s=1.0, units={})
    needs = {"src": 0.02, **{b: 0.3 for b in BRANCHES}}
    assert process_loads(view, needs, {b: 2 for b in BRANCHES}, 2) == pytest.approx([0.92, 0.9])
    assert process_loads(view, needs, {"b1": 1, **{b: 2 for b in BRANCHES[1:]}}, 2) == pytest.approx([1.07, 0.75])


def test_a_replica_goes_back_only_when_its_process_can_take_its_work():
    levels = replace(HELD, replicas={b: 2 for b in BRANCHES})
    back = SetReplicas("b1", 1, reason="test")
    assert not fits_after(spread_period(0.13, 0.15), levels, back, SHRINK_HEADROOM)  # process 0 is full
    assert fits_after(spread_period(0.03, 0.15), levels, back, SHRINK_HEADROOM)      # a light load
    assert fits_after(spread_period(0.13, 0.15), replace(levels, held=False), back, SHRINK_HEADROOM)


def test_a_moved_units_replica_counts_for_it_in_the_view():
    ops = {"src": op("src", "source", n=1000, busy=0.01, sent={"b1#split": 1000}),
           "b1": op("b1", n=0, busy=0.0, sent={}), "b1#split": op("b1#split", "stateful", n=0, busy=0.0),
           "b1#0": op("b1#0", n=0, busy=0.0), "b1#1": op("b1#1", n=1000, busy=0.1, sent={"b1#merge": 1000}),
           "b1#merge": op("b1#merge", "stateful", n=0, busy=0.0, sent={"sink": 1000}),
           "sink": op("sink", "sink", n=1000, out=0, busy=0.01)}
    period = PeriodStats(start_s=0.0, period_s=1.0, operators=ops, workers=())
    levels = Levels(threads=(1, 1), replicas={"b1": 1}, held=True)
    moved = flow_view(period, replace(levels, moved={"b1": 1})).units["b1"]
    assert (moved.tuples_in, moved.busy_s, moved.instances) == (1000, pytest.approx(0.1), 1)
    assert flow_view(period, levels).units["b1"].tuples_in == 0  # unmoved: its bypass is the unit
