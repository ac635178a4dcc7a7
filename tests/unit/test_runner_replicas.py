"""``Runner(replicas=...)``: operators run as ordered split → replicas → merge (C-Stream §4.2)."""

from __future__ import annotations

import pytest

import elastream as es
from flow_deadline import run_with_deadline


def running_sums() -> es.Flow:
    flow = es.Flow("replicas")
    (flow.source(es.ops.FromIterable([(i % 13, i) for i in range(3000)]), name="src")
         .key_by(lambda e: e[0], partitions=4).reduce(lambda a, e: (e[0], a[1] + e[1]), )
         .collect(name="out"))
    return flow


def sum_operator(flow: es.Flow) -> str:
    return next(name for name in flow.operators if name.startswith("keyedreduce"))


@pytest.mark.parametrize("processes", [1, 2])
def test_replicas_option_keeps_the_sequential_output(processes):
    expected = run_with_deadline(running_sums(), threads=1).outputs["out"]
    flow = running_sums()
    name = sum_operator(flow)
    result = run_with_deadline(flow, timeout=60, processes=processes, threads=1, replicas={name: 2})
    assert result.outputs["out"] == expected
    assert {f"{name}#0", f"{name}#1", f"{name}#merge"} <= set(result.stats.operators)


def test_replicas_option_is_validated():
    with pytest.raises(ValueError, match="replicas"):
        es.Runner(replicas=3)


def test_a_reduce_without_partitions_spreads_its_keys_over_every_replica():
    """Its 128 default key groups are what the split routes: both replicas get keys, no key meets two."""
    flow = es.Flow("groups")
    (flow.source(es.ops.FromIterable([(f"user-{i % 40}", i) for i in range(2000)]), name="src")
         .key_by(lambda e: e[0]).reduce(lambda a, e: (e[0], a[1] + e[1]), name="sum")
         .collect(name="out"))
    expected = run_with_deadline(flow, threads=1).outputs["out"]
    handle = es.Runner(threads=2, replicas={"sum": 2}).start(flow)
    assert handle.wait(30.0).outputs["out"] == expected
    keys = [set(handle.operator(f"sum#{r}").inner.acc) for r in (0, 1)]
    assert keys[0] and keys[1] and not keys[0] & keys[1] and len(keys[0] | keys[1]) == 40


def test_replicas_naming_no_operator_of_the_flow_fail_naming_it():
    with pytest.raises(es.FlowValidationError, match="'nope', which is not in flow 'replicas'"):
        es.Runner(replicas={"nope": 2}).run(running_sums())
