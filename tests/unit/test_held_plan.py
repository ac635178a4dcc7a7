"""Which flows plain ``Runner()`` holds worker processes ready for (``elastic.held.held_plan``)."""

from __future__ import annotations

import elastream as es
from elastream.elastic.held import MAX_HELD_UNITS, held_plan
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
