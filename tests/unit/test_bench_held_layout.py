"""The diagnostic static run of ``elastream bench elastic``: plain ``Runner()``'s settled layout, run statically.

Its figures split plain ``Runner()``'s gap to the best static configuration into the elastic mechanism's
cost and the layout's; this checks the layout is the one the held run reaches, and that it runs.
"""

from __future__ import annotations

import argparse

import pytest

from elastream.bench._elastic_flows import SHAPES, SINK, SOURCE
from elastream.bench._elastic_measure import check_output
from elastream.bench.elastic import HELD_LAYOUT, configs_for, held_layout
from elastream.ordered.replicate import merge_name, replica_name, split_name

pytestmark = [pytest.mark.timeout(90)]

CHAINS = ["busy_0_0+busy_0_1+busy_0_2", "busy_1_0+busy_1_1+busy_1_2"]


def test_every_unit_has_a_replica_in_each_process_and_everything_else_stays_in_process_0():
    unit_flow, runner = held_layout(SHAPES["ibm-fig10"].build("hold", 0.2), 2)
    assert sorted(runner.config.replicas) == CHAINS and set(runner.config.replicas.values()) == {2}
    placement = runner.config.placement
    for chain in CHAINS:
        assert (placement[replica_name(chain, 0)], placement[replica_name(chain, 1)]) == (0, 1)
        assert placement[split_name(chain)] == placement[merge_name(chain)] == 0
    assert {placement[name] for name in unit_flow.operators} == {0}
    assert runner.config.threads == 1 and runner.config.processes == 2 and not runner.elastic


def test_the_layout_run_joins_the_sweep_only_with_two_processes_and_replicas():
    def labels(*processes: int, no_replicas: bool = False) -> list[str]:
        args = argparse.Namespace(processes=list(processes), threads=[1], fuse=["on"], no_replicas=no_replicas)
        return [c.label for c in configs_for(SHAPES["cstream-fig11"], args)]

    assert HELD_LAYOUT in labels(1, 2) and labels(1, 2)[-1] == HELD_LAYOUT
    assert HELD_LAYOUT not in labels(1) and HELD_LAYOUT not in labels(1, 2, no_replicas=True)


@pytest.mark.slow
def test_the_layout_runs_the_shape_over_two_processes_with_every_tuple_delivered():
    unit_flow, runner = held_layout(SHAPES["ibm-fig10"].build("hold", 0.1), 2)
    result = runner.run(unit_flow, timeout=60)
    source = result.stats.operators[SOURCE]
    assert source.tuples_out > 0
    assert check_output(result.outputs[SINK], source.tuples_out, ordered=False) is None
