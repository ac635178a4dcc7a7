"""Fuse and Unfuse reach the worker process that runs the chain, over the control channel.

A 2-process run whose process 1 runs ``a → b → c``: process 1 compiled it as one
task; ``Unfuse`` makes it run as three tasks and ``Fuse`` one again, while tuples
flow, with no tuple lost, duplicated or reordered. The parent's ``fused`` follows
what process 1 runs; a chain over two processes is refused with the reason; the
elastic loop's fusion rule plans each process apart (its plan of process 1 is
process 1's part).
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.elastic.run import controller_for
from elastream.runtime.decisions import Fuse, Unfuse
from gated_source import Gated

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CHAIN = ("a", "b", "c")
PLACEMENT = {"src": 0, "a": 1, "b": 1, "c": 1, "out": 1}


def chain_flow(source: es.Operator) -> es.Flow:
    flow = es.Flow("regroup-in-a-worker")
    (flow.source(source, name="src").map(lambda x: x + 1, name="a").map(lambda x: x * 2, name="b")
     .map(lambda x: x - 1, name="c").sink(es.ops.Collect(), name="out"))
    return flow


def start(source: es.Operator):
    runner = es.Runner(processes=2, threads=1, elastic=False, batch_size=8, max_queue_size=32, placement=PLACEMENT)
    return runner.start(chain_flow(source))


def delivered(handle) -> int:
    part = handle.part_stats()[1]
    return part.operators["out"].tuples_in if part is not None and "out" in part.operators else 0


def test_a_chain_in_a_worker_process_comes_apart_and_fuses_again_while_tuples_flow(wait_until):
    n = 3000
    gates = {i: threading.Event() for i in (1000, 2000)}
    handle = start(Gated(n, gates))
    try:
        assert CHAIN in handle.fused
        wait_until(lambda: delivered(handle) == 1000, timeout=30, what="the first 1,000 tuples in process 1")
        [apart] = handle.submit([Unfuse(CHAIN, reason="test")])
        assert (apart.ok, apart.why) == (True, "")
        assert CHAIN not in handle.fused
        gates[1000].set()
        wait_until(lambda: delivered(handle) == 2000, timeout=30, what="2,000 tuples, unfused")
        [again] = handle.submit([Fuse(CHAIN, reason="test")])
        assert (again.ok, again.why) == (True, "")
        assert CHAIN in handle.fused
        assert [a.decision for a in handle.timeline] == [Unfuse(CHAIN, reason="test"), Fuse(CHAIN, reason="test")]
    finally:
        for gate in gates.values():
            gate.set()
    result = handle.wait(timeout=60)
    assert result.outputs["out"] == [(x + 1) * 2 - 1 for x in range(n)]
    assert {name: result.stats.operators[name].tuples_in for name in CHAIN} == dict.fromkeys(CHAIN, n)


def test_a_chain_over_two_processes_or_unknown_operators_is_refused_with_the_reason(wait_until):
    gate = threading.Event()
    handle = start(Gated(100, {50: gate}))
    try:
        wait_until(lambda: delivered(handle) == 50, timeout=30, what="tuples in process 1")
        over, unknown = handle.submit([Fuse(("src", "a")), Unfuse(("a", "nope"))])
        assert (over.ok, over.why) == (False, "src → a runs over processes 0, 1: a chain is fused within one process")
        assert (unknown.ok, unknown.why) == (
            False, "operator 'nope' does not run as an operator of its own in this run")
    finally:
        gate.set()
    assert handle.wait(timeout=60).outputs["out"] == [(x + 1) * 2 - 1 for x in range(100)]


def test_the_fusion_rule_of_a_run_over_processes_has_a_plan_per_process(wait_until):
    gate = threading.Event()
    handle = start(Gated(100, {50: gate}))
    try:
        rule = controller_for(handle, es.Elastic()).fusion
        assert [plan.one_thread for plan in rule.plans] == [(), (CHAIN,)]
        assert rule.plans[1].operators == frozenset(CHAIN)
    finally:
        gate.set()
        handle.wait(timeout=60)
