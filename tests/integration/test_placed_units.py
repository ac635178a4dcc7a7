"""``Runner(processes=P)`` with at least P units: each unit starts whole where a static plan puts it (issue 20).

Its split, replica 0 and merge share that process and the unit runs through its bypass there;
its other replicas wait in the other processes until DS2 (or the caller) adds them, which
splices the unit in whichever process it lives. The output stays exactly the sequential one.
"""

from __future__ import annotations

import threading

import pytest
from gated_source import Gated

import elastream as es
from elastream.ordered.replicate import merge_name, replica_name, split_name
from elastream.processes.supervisor import ProcessRunHandle
from elastream.runtime.decisions import SetReplicas

pytestmark = pytest.mark.timeout(120)

N = 6_000


def two_units(gate: threading.Event | None = None) -> es.Flow:
    """src (stopping after 500 tuples until ``gate`` opens) → a (stateless) → x (keyed) → out: two units."""
    flow = es.Flow("placed-units")
    (flow.source(Gated(N, {500: gate} if gate is not None else {}), name="src")
         .map(lambda i: (i % 31, i * 3), name="a")
         .key_by(lambda e: e[0])
         .process(lambda count, e: (count + 1, [(e[0], e[1], count + 1)]), state=int, name="x")
         .sink(es.ops.Collect(), name="out"))
    return flow


def sequential() -> list:
    return es.Runner(processes=1, elastic=False).run(two_units()).outputs["out"]


def test_each_unit_starts_whole_in_its_home_and_spreads_when_asked():
    gate = threading.Event()
    handle = es.Runner(processes=2, elastic=es.Elastic(period_s=30)).start(two_units(gate))
    try:
        assert isinstance(handle.inner, ProcessRunHandle)
        levels = handle.loop.levels
        assert levels.replicas == {"a": 1, "x": 1} and levels.bypassed and not levels.held
        where = handle.inner.assignment
        homes = {unit: where[replica_name(unit, 0)] for unit in ("a", "x")}
        assert all(where[split_name(u)] == where[merge_name(u)] == home for u, home in homes.items())
        assert set(homes.values()) == {0, 1}  # the unit homed in the worker is spliced there
        applied = handle.submit([SetReplicas(unit, 2, reason="test") for unit in ("a", "x")])
        assert all(a.ok for a in applied), [a.why for a in applied]
        assert handle.loop.levels.replicas == {"a": 2, "x": 2}  # the controllers size from the caller's counts
    finally:
        gate.set()
    result = handle.wait(60.0)
    assert result.outputs["out"] == sequential()
    raw = handle.inner.stats().operators
    assert raw["x#1"].tuples_in > 0 and raw["a#1"].tuples_in > 0  # the replicas held ready took work
    assert result.stats.operators["x"].tuples_in == N


def test_a_run_left_to_itself_gives_the_sequential_output():
    result = es.Runner(processes=2).run(two_units(), timeout=60)
    assert result.outputs["out"] == sequential()
