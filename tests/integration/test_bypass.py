"""Held units run through a bypass until their first replica joins (issue 20, runtime.bypass).

Plain ``Runner()`` builds each replication unit with its split, replica 0 and merge in this
process and a replica held in each worker process. Until a ``SetReplicas`` above one, the
unit's operator runs as one task straight from its producer to its consumer (no split or
merge activations per batch). These tests check that the output stays exactly the
sequential one whether the run ends bypassed or spliced mid-stream, that a keyed operator's
end outputs come once, that the statistics count the unit's tuples as one operator, and
that a failure or a shutdown while bypassed ends the run cleanly.
"""

from __future__ import annotations

import itertools
import threading

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.errors import OperatorError
from elastream.processes.supervisor import ProcessRunHandle
from elastream.runtime.decisions import SetReplicas

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]

N = 4_000


def gated(n: int, gate: threading.Event, after: int = 700):
    """``(key, i)`` tuples; after the first ``after`` the source waits for ``gate``."""
    for i in range(n):
        if i == after:
            gate.wait(30.0)
        yield (i % 23, i)


def opened() -> threading.Event:
    gate = threading.Event()
    gate.set()
    return gate


def counting_flow(source, fail_at: int | None = None) -> es.Flow:
    """A keyed running count whose end outputs (per key, first-seen order) come after the data."""
    def step(count, e):
        if fail_at is not None and e[1] == fail_at:
            raise ValueError(f"bad tuple {e[1]}")
        return count + 1, [(e[0], e[1], count + 1)]

    flow = es.Flow("bypass-keyed")
    (flow.source(es.ops.FromIterable(source), name="src")
         .map(lambda e: (e[0], e[1] * 2), name="double")
         .key_by(lambda e: e[0])
         .process(step, state=int, name="count", on_end=lambda key, count: [("end", key, count)])
         .sink(es.ops.Collect(), name="out"))
    return flow


def sequential(fail_at: int | None = None) -> list:
    return es.Runner(processes=1, elastic=False).run(counting_flow(gated(N, opened()), fail_at)).outputs["out"]


def _bypasses(handle):
    inner = handle.inner
    assert isinstance(inner, ProcessRunHandle)
    return inner._local.handle.bypasses


def test_a_run_that_ends_bypassed_gives_the_sequential_output_and_its_end_outputs_once():
    result = es.Runner().run(counting_flow(gated(N, opened())))
    assert result.outputs["out"] == sequential()
    ops = result.stats.operators
    assert ops["count"].tuples_in == N and ops["count"].tuples_out == N + 23
    assert ops["double"].tuples_in == N
    assert ops["count#split"].tuples_in == 0 and ops["count#merge"].tuples_out == 0


def test_a_splice_mid_stream_keeps_order_state_and_counts():
    gate = threading.Event()
    handle = es.Runner().start(counting_flow(gated(N, gate)))
    try:
        bypasses = _bypasses(handle)
        assert bypasses.bypassed("count")
        applied = handle.submit([SetReplicas("count", 2, reason="test")])
        assert applied[0].ok, applied[0].why
        assert not bypasses.bypassed("count")
    finally:
        gate.set()
    result = handle.wait(60)
    assert result.outputs["out"] == sequential()
    ops = result.stats.operators
    assert ops["count"].tuples_in == N                        # the bypass's tuples plus the split's
    assert ops["count#split"].tuples_in > 0                   # the rest went through the split


def test_the_consumer_holds_what_it_would_behind_the_operator_until_the_merge_feeds_it():
    from elastream.ordered.merge import MERGE_OUTPUT_CAPACITY

    gate = threading.Event()
    handle = es.Runner().start(counting_flow(gated(N, gate)))
    try:
        engine = handle.inner._local.handle
        consumer = next(t for t in engine.sched.tasks if t.name == "out").inputs[0]
        assert consumer.capacity < MERGE_OUTPUT_CAPACITY  # a bypass never blocked would starve a slower consumer
        assert handle.submit([SetReplicas("count", 2, reason="test")])[0].ok
        assert consumer.capacity == MERGE_OUTPUT_CAPACITY  # the merge's whole releases fit again
    finally:
        gate.set()
    assert handle.wait(60).outputs["out"] == sequential()


def test_a_second_splice_and_a_shrink_to_one_change_nothing_more():
    gate = threading.Event()
    handle = es.Runner().start(counting_flow(gated(N, gate)))
    try:
        assert handle.submit([SetReplicas("count", 1, reason="test")])[0].decision.count == 1
        assert _bypasses(handle).bypassed("count")            # one replica: no splice needed
        assert handle.submit([SetReplicas("double", 2, reason="test")])[0].ok
        assert handle.submit([SetReplicas("double", 1, reason="test")])[0].ok
        assert not _bypasses(handle).bypassed("double") and _bypasses(handle).bypassed("count")
    finally:
        gate.set()
    assert handle.wait(60).outputs["out"] == sequential()


def test_an_error_inside_a_bypassed_unit_names_the_operator():
    with pytest.raises(OperatorError) as caught:
        es.Runner().run(counting_flow(gated(N, opened()), fail_at=1_234))
    assert caught.value.operator == "count"
    assert "bad tuple 1234" in str(caught.value)


def test_shutdown_while_bypassed_ends_cleanly():
    endless = ((i % 23, i) for i in itertools.count())  # never blocks a worker: the shutdown is seen at once
    handle = es.Runner().start(counting_flow(endless))
    assert _bypasses(handle).bypassed("count")
    result = handle.shutdown(30)
    assert result.shutdown
    assert handle.inner.done and handle.inner.worker_pids[1:] == []


def test_a_bypassed_chain_reports_each_member_with_its_tuples_and_time():
    flow = es.Flow("bypass-chain")
    (flow.source(es.ops.FromIterable(range(N)), name="src")
         .map(lambda x: x * 3, name="a")
         .filter(lambda x: x % 2 == 0, name="b")
         .sink(es.ops.Collect(), name="out"))
    result = es.Runner().run(flow)
    assert result.outputs["out"] == [x * 3 for x in range(N) if x * 3 % 2 == 0]
    ops = result.stats.operators
    assert (ops["a"].tuples_in, ops["a"].tuples_out, ops["b"].tuples_in, ops["b"].tuples_out) == (N, N, N, N // 2)
    assert ops["a"].busy_s > 0 and ops["b"].busy_s > 0
