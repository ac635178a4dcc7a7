"""Which flows plain ``Runner()`` holds worker processes ready for (``elastic.held.held_plan``), and where
``Runner(processes=P)`` starts its units (``placed_plan``)."""

from __future__ import annotations

import elastream as es
from elastream.elastic.held import MAX_HELD_UNITS, held_plan, placed_plan
from elastream.processes.held_start import workers_can_wait
from elastream.runtime.config import RunConfig
from elastream.workloads.large import data_parallel


def test_a_narrow_data_parallel_graph_holds_a_replica_of_each_branch_per_process():
    flow, _ = data_parallel(4, n_tuples=10)
    plan = held_plan(flow, RunConfig(), es.Elastic(), cores=2)
    assert plan is not None
    assert set(plan.replicas) == {f"busy_{i}_0" for i in range(4)}


def test_a_graph_wider_than_the_cap_runs_in_one_process():
    flow, _ = data_parallel(MAX_HELD_UNITS + 1, n_tuples=10)
    assert held_plan(flow, RunConfig(), es.Elastic(), cores=2) is None
    flow, _ = data_parallel(MAX_HELD_UNITS, n_tuples=10)
    assert held_plan(flow, RunConfig(), es.Elastic(), cores=2) is not None


def test_one_core_holds_nothing():
    flow, _ = data_parallel(4, n_tuples=10)
    assert held_plan(flow, RunConfig(), es.Elastic(), cores=1) is None


def test_processes_given_place_each_of_enough_units_whole_in_a_home_of_its_own():
    flow, _ = data_parallel(4, n_tuples=10)
    plan = placed_plan(flow, RunConfig(processes=2))
    assert plan is not None and plan.replicas == {f"busy_{i}_0": 1 for i in range(4)}
    where = plan.config.placement
    homes = [where[f"busy_{i}_0"] for i in range(4)]
    assert sorted(homes) == [0, 0, 1, 1]  # the static plan's layout: two branches in each process
    assert all(where[f"busy_{i}_0#split"] == where[f"busy_{i}_0#merge"] == homes[i] for i in range(4))
    assert plan.config.active_replicas == {f"busy_{i}_0": (0,) for i in range(4)}
    assert [b.unit for b in plan.config.bypass] == [f"busy_{i}_0" for i in range(4)]


def test_processes_given_spread_every_replica_of_fewer_units_than_processes():
    flow, _ = data_parallel(1, n_tuples=10)
    plan = placed_plan(flow, RunConfig(processes=2))
    assert plan is not None and plan.replicas == {"busy_0_0": 2}
    assert plan.config.active_replicas is None and plan.config.bypass == ()


def test_workers_wait_unstarted_only_while_they_host_nothing_that_works():
    active = {"u": (0,)}
    assert workers_can_wait({"src": 0, "u#0": 0, "u#1": 1}, active)
    assert not workers_can_wait({"src": 0, "u#0": 1, "u#1": 0}, active)
    assert not workers_can_wait({"src": 0, "u#0": 0, "u#1": 1, "out": 1}, active)
    assert not workers_can_wait({"src": 0, "u#0": 0, "u#1": 1}, None)
