"""Replication units of an elastic multi-process run: chains fused into one unit, one replica per process."""

from __future__ import annotations

import cloudpickle

import elastream as es
from elastream.elastic.units import fuse_chains, replication_units
from elastream.runtime.fusion import FusedChain


def inc(x):
    return x + 1


def pipeline(n=2000, keyed=True):
    flow = es.Flow("units")
    s = flow.source(range(n), name="src").map(inc, name="a").filter(lambda x: x % 3, name="b").map(inc, name="c")
    if keyed:
        s = s.key_by(lambda x: x % 7).reduce(lambda acc, x: acc + x, initial=int, name="sum")
    s.sink(es.ops.Collect(), name="out")
    return flow


def test_a_chain_becomes_one_operator_named_after_its_members():
    fused = fuse_chains(pipeline())
    assert list(fused.operators) == ["src", "a+b+c", "sum", "out"]
    assert isinstance(fused["a+b+c"].operator, FusedChain)
    assert [(c.src, c.dst) for c in fused.connections] == [("src", "a+b+c"), ("a+b+c", "sum"), ("sum", "out")]


def test_every_replicable_unit_gets_one_replica_per_process():
    _, counts = replication_units(pipeline(), 2)
    assert counts == {"a+b+c": 2, "sum": 2}
    assert replication_units(pipeline(), 1)[1] == {}


def test_a_chain_crosses_to_a_worker_and_gets_its_own_members_per_replica():
    chain = fuse_chains(pipeline())["a+b+c"].operator
    copy = cloudpickle.loads(cloudpickle.dumps(chain))
    assert copy.names == ("a", "b", "c")
    one, two = chain.instantiate(), chain.instantiate()
    assert all(x is not y for x, y in zip(one.members, two.members))


def test_runner_with_processes_runs_the_units_and_gives_the_sequential_output():
    expected = es.Runner(threads=1, elastic=False).run(pipeline(), timeout=60).outputs["out"]
    handle = es.Runner(processes=2).start(pipeline())
    result = handle.wait(120)
    assert result.outputs["out"] == expected
    assert {"a+b+c#0", "a+b+c#1", "sum#0", "sum#1"} <= set(handle.inner.stats().operators)  # what the loop reads
    written = result.stats.operators  # what the user reads: the flow's own names
    assert {"a", "b", "c", "sum"} <= set(written) and not {"a+b+c#0", "sum#0"} & set(written)
    assert written["sum"].tuples_in == len(expected)


def test_a_user_placement_or_replicas_keep_the_flow_as_written():
    result = es.Runner(processes=2, replicas={"sum": 2}).run(pipeline(), timeout=120)
    assert "a" in result.stats.operators and "a+b+c#0" not in result.stats.operators


def fails_at_1500(x):
    if x == 1500:
        raise ValueError("bad record")
    return x


def test_a_failure_in_a_replicated_chain_names_the_member():
    import pytest

    flow = es.Flow("units-fail")
    flow.source(range(3000), name="src").map(inc, name="a").map(fails_at_1500, name="b").sink(
        es.ops.Collect(), name="out")
    with pytest.raises(es.OperatorError) as info:
        es.Runner(processes=2).run(flow, timeout=120)
    assert info.value.operator == "b"


def test_replicas_held_ready_can_be_sized_down_and_up_while_the_flow_runs():
    import itertools
    import time

    from elastream.runtime.decisions import SetReplicas

    flow = es.Flow("units-sized")
    (flow.source(itertools.count(), name="src").map(inc, name="a").map(inc, name="b")
         .filter(lambda x: False, name="none").sink(es.ops.Collect(), name="out"))
    handle = es.Runner(processes=2, elastic=False, replicas=None).start(flow)
    try:
        assert handle.submit([SetReplicas("nope", 1)])[0].ok is False
    finally:
        handle.shutdown(timeout=10)
    fused_handle = es.Runner(processes=2, elastic=es.Elastic(controller="ds2", period_s=10)).start(flow)
    try:
        unit = "a+b+none"
        assert fused_handle.loop.levels.replicas == {unit: 2}
        down, up = fused_handle.submit([SetReplicas(unit, 1, reason="test")])[0], None
        time.sleep(0.1)
        up = fused_handle.submit([SetReplicas(unit, 2, reason="test")])[0]
        assert down.ok and up.ok, (down.why, up.why)
    finally:
        fused_handle.shutdown(timeout=10)
