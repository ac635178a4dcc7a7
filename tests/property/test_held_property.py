"""Property: with worker processes held ready (plain ``Runner()``), replicas added and given back at random
points — key groups moving with their state between processes, thread levels changing beside them —
never change the output: it is exactly the sequential one (Definition 5.1), for keyed and stateless units."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.runtime.decisions import SetReplicas
from gated_source import Gated

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow,
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]

N = 4_000


def keyed(source) -> tuple[es.Flow, str]:
    flow = es.Flow("held-keyed")
    (flow.source(source, name="src").key_by(lambda i: i % 37)
         .process(lambda count, i: (count + 1, [(i % 37, i, count + 1)]), state=int, name="x")
         .sink(es.ops.Collect(), name="out"))
    return flow, "x"


def stateless(source) -> tuple[es.Flow, str]:
    flow = es.Flow("held-chain")
    (flow.source(source, name="src").map(lambda i: i * 7, name="a").filter(lambda i: i % 3 != 0, name="b")
         .sink(es.ops.Collect(), name="out"))
    return flow, "a+b"


EXPECTED = {
    keyed: es.Runner(processes=1, elastic=False).run(keyed(range(N))[0]).outputs["out"],
    stateless: es.Runner(processes=1, elastic=False).run(stateless(range(N))[0]).outputs["out"],
}


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(build=st.sampled_from([keyed, stateless]),
       steps=st.lists(st.tuples(st.integers(100, N - 100), st.sampled_from([1, 2])), min_size=1, max_size=4,
                      unique_by=lambda s: s[0]))
def test_replicas_added_and_given_back_at_random_points_keep_the_sequential_output(build, steps):
    steps = sorted(steps)
    gates = {at: threading.Event() for at, _ in steps}
    flow, unit = build(Gated(N, gates, chunk=16))
    # The utilization controller changes thread levels beside the test's replica decisions.
    handle = es.Runner(elastic=es.Elastic(period_s=0.05, controller="utilization")).start(flow)
    answers = []
    try:
        for at, count in steps:
            answers += handle.submit([SetReplicas(unit, count, reason="property")])
            gates[at].set()
    finally:
        for gate in gates.values():
            gate.set()
    result = handle.wait(120)
    assert result.outputs["out"] == EXPECTED[build]
    assert all(a.ok for a in answers), [a.why for a in answers if not a.ok]
