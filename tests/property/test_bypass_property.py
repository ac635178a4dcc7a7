"""Property: a held unit spliced from its bypass at any point — or never — gives exactly the sequential output.

The mechanism alone (:mod:`elastream.runtime.bypass`), on the threads engine of one process:
a flow replicated as split → replicas → merge with only replica 0 active, the unit bypassed
from the start; the test splices it at a random point (the source waits at a gate there, or
races on), then adds the second replica or not, at one or two worker threads. Keyed units
move key groups with their state to the joining replica; their end outputs come once.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es
from elastream.ordered.replicate import merge_name, replica_name, replicate_flow, split_name
from elastream.runtime.bypass import BypassSpec
from elastream.runtime.config import RunConfig
from elastream.runtime.engine import start_threads
from gated_source import Gated

pytestmark = [pytest.mark.timeout(300)]

N = 3_000


def keyed(source) -> tuple[es.Flow, str]:
    flow = es.Flow("bypass-keyed")
    (flow.source(source, name="src").key_by(lambda i: i % 29)
         .process(lambda count, i: (count + 1, [(i % 29, i, count + 1)]), state=int, name="x",
                  on_end=lambda key, count: [("end", key, count)])
         .sink(es.ops.Collect(), name="out"))
    return flow, "x"


def stateless(source) -> tuple[es.Flow, str]:
    flow = es.Flow("bypass-stateless")
    (flow.source(source, name="src").flat_map(lambda i: [i] * (i % 3), name="x")
         .sink(es.ops.Collect(), name="out"))
    return flow, "x"


EXPECTED = {build: es.Runner(threads=1, elastic=False).run(build(range(N))[0]).outputs["out"]
            for build in (keyed, stateless)}


def run_bypassed(build, cut: int, gated: bool, splice: bool, grow: bool, threads: int) -> list:
    gate = threading.Event()
    flow, unit = build(Gated(N, {cut: gate}) if gated else range(N))
    replicated = replicate_flow(flow, {unit: 2}, active={unit: (0,)})
    spec = BypassSpec(unit, split_name(unit), replica_name(unit, 0), merge_name(unit))
    handle = start_threads(replicated, RunConfig(threads=threads, bypass=(spec,)))
    try:
        assert handle.bypasses.bypassed(unit)
        if splice:
            ok, why, paused_s = handle.splice(unit)
            assert ok or "end of its input" in why, why
            assert paused_s >= 0.0
            if ok and grow:
                handle.operator(split_name(unit)).set_active(range(2))
    finally:
        gate.set()
    return handle.wait(60).outputs["out"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(build=st.sampled_from([keyed, stateless]), cut=st.integers(1, N - 1), gated=st.booleans(),
       splice=st.booleans(), grow=st.booleans(), threads=st.sampled_from([1, 2]))
def test_a_spliced_or_bypassed_unit_gives_the_sequential_output(build, cut, gated, splice, grow, threads):
    assert run_bypassed(build, cut, gated, splice, grow, threads) == EXPECTED[build]
