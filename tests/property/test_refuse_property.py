"""Chains fused and un-fused at random points of a running flow give exactly the sequential run (runtime.refuse).

Random chains of map / filter / flat_map / Busy (an operator that takes one
worker at a time; a keyed operator now and then cuts the chain in two) run on
one or two worker threads with random batch and queue sizes. At random points
(a gated source stops at random positions while the test acts, and acts again
while the flow runs) the test un-fuses a running chain, fuses a random slice of
a chain, or changes the thread count. The output must equal the sequential
reference, each operator's tuple counts those of an unfused run, no count may
ever go backwards across a regroup, and ``handle.fused`` must name exactly the
chains that run as one task. The same holds when an elastic loop with short
periods changes the thread level at random and the fusion rule follows it.
"""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es
from elastream.elastic.config import Elastic
from elastream.elastic.run import controller_for
from elastream.elastic.fusion_rule import FusionPlan, FusionRule
from elastream.elastic.loop import ElasticLoop
from elastream.runtime.decisions import Fuse, Levels, SetThreads, Unfuse
from elastream.runtime.fusion import member_names
from gated_source import Gated

STAGES = ("map", "filter", "flat_map", "busy", "keyed")

ACTIONS = st.one_of(
    st.tuples(st.just("unfuse"), st.integers(0, 3)),
    st.tuples(st.just("fuse"), st.integers(0, 3), st.integers(0, 6), st.sampled_from([2, 3, 9, 9])),
    st.tuples(st.just("threads"), st.integers(1, 2)),
)


def reference(stages: list[tuple[str, int]], items: list[int]) -> list[int]:
    """Each stage over the whole list, one tuple at a time."""
    for kind, k in stages:
        if kind == "map":
            items = [x * 3 + k for x in items]
        elif kind == "filter":
            items = [x for x in items if x % (k + 2)]
        elif kind == "flat_map":
            items = [x + j for x in items for j in range(x % (k + 1))]
        elif kind == "keyed":
            sums: dict[int, int] = {}
            out = []
            for x in items:
                sums[x % (k + 3)] = sums.get(x % (k + 3), 0) + x
                out.append(sums[x % (k + 3)])
            items = out
    return items                                   # a Busy forwards every tuple as it is


def build(stages: list[tuple[str, int]], source: es.Operator, busy_us: float = 1.0) -> es.Flow:
    flow = es.Flow("random-regroups")
    s = flow.source(source, name="src")
    for i, (kind, k) in enumerate(stages):
        name = f"{kind}_{i}"
        if kind == "map":
            s = s.map(lambda x, k=k: x * 3 + k, name=name)
        elif kind == "filter":
            s = s.filter(lambda x, k=k: x % (k + 2), name=name)
        elif kind == "flat_map":
            s = s.flat_map(lambda x, k=k: [x + j for j in range(x % (k + 1))], name=name)
        elif kind == "busy":
            s = s.then(es.ops.Busy(busy_us, seed=k), name=name)
        else:
            s = s.key_by(lambda x, k=k: x % (k + 3)).process(lambda total, x: (total + x, [total + x]), state=int,
                                                              name=name)
    s.sink(es.ops.Collect(), name="out")
    return flow


def decision(action: tuple, handle, plan: FusionPlan):
    """The decision an action stands for on the run as it is now (None: nothing to act on)."""
    if action[0] == "unfuse":
        return Unfuse(handle.fused[action[1] % len(handle.fused)]) if handle.fused else None
    if not plan.one_thread:
        return None
    chain = plan.one_thread[action[1] % len(plan.one_thread)]
    first = action[2] % len(chain)
    part = chain[first:first + action[3]]
    return Fuse(part) if len(part) > 1 else None


def act(action: tuple, handle, plan: FusionPlan) -> None:
    """Apply one action; counts seen before and after it must never go backwards."""
    if action[0] == "threads":
        handle.set_threads(action[1])
        return
    made = decision(action, handle, plan)
    if made is None:
        return
    before = handle.stats().operators
    handle.submit([made])
    after = handle.stats().operators
    # Tuple counts only: a running chain's busy seconds are shared out by its members' sampled stage times,
    # which move while it runs (test_refuse checks busy seconds across a switch where nothing moves).
    for name, op in before.items():
        assert after[name].tuples_in >= op.tuples_in and after[name].tuples_out >= op.tuples_out, name


def tuple_counts(result: es.RunResult) -> dict[str, tuple[int, int]]:
    return {name: (op.tuples_in, op.tuples_out) for name, op in result.stats.operators.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.lists(st.tuples(st.sampled_from(STAGES), st.integers(0, 3)), min_size=2, max_size=7),
       n=st.integers(1, 400), cuts=st.lists(st.floats(0.0, 0.99), min_size=1, max_size=3),
       actions=st.lists(ACTIONS, max_size=10), threads=st.sampled_from([1, 2]),
       batch_size=st.sampled_from([1, 3, 16]), queue=st.sampled_from([2, 8, 64]))
def test_regroups_at_random_points_keep_the_sequential_run(stages, n, cuts, actions, threads, batch_size, queue):
    items = list(range(n))
    # The source stops at each gate while the test acts (and the flow drains), so the actions fall inside the
    # stream; some act while tuples still flow (the source has not reached its gate yet).
    gates = {int(cut * n): threading.Event() for cut in sorted(cuts)}
    flow = build(stages, Gated(n, gates, chunk=batch_size))
    plan = FusionPlan.of(flow)
    handle = es.Runner(threads=threads, elastic=False, batch_size=batch_size, max_queue_size=queue).start(flow)
    try:
        for i, gate in enumerate(gates.values()):
            for action in actions[i::len(gates)]:
                act(action, handle, plan)
            gate.set()
    finally:
        for gate in gates.values():
            gate.set()
    result = handle.wait(timeout=60)
    plain = es.Runner(threads=1, elastic=False, scheduling=es.SchedulingConfig(fuse=False))
    unfused = plain.run(build(stages, Gated(n, {})), timeout=60)
    assert result.outputs["out"] == unfused.outputs["out"] == reference(stages, items)
    assert tuple_counts(result) == tuple_counts(unfused)
    assert set(handle.fused) == {member_names(t) for t in handle.sched.tasks if len(member_names(t)) > 1}


class ScriptedThreads:
    """Thread levels from a script, one per period (cycling), beside the fusion rule: the loop's controller."""

    name = "scripted"

    def __init__(self, plan: FusionPlan | list[FusionPlan], levels: list[int], process: int = 0):
        self.rule = FusionRule(plan)
        self.levels = levels
        self.process = process
        self.periods = 0

    def decide(self, period, levels, machine):
        level = self.levels[self.periods % len(self.levels)]
        self.periods += 1
        same = level == levels.threads[self.process]
        change = [] if same else [SetThreads(level, process=self.process, reason="scripted")]
        return change + self.rule.decide(period, levels, machine)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.lists(st.tuples(st.sampled_from(STAGES), st.integers(0, 3)), min_size=2, max_size=6),
       n=st.integers(200, 3000), levels=st.lists(st.integers(1, 2), min_size=1, max_size=6),
       threads=st.sampled_from([1, 2]), batch_size=st.sampled_from([4, 16]))
def test_the_fusion_rule_in_a_fast_elastic_loop_keeps_the_sequential_run(stages, n, levels, threads, batch_size):
    # A Busy of 50 µs a tuple heads the chain (every Busy stage costs as much), so a run lasts many 10 ms periods.
    flow = build([("busy", 0), *stages], Gated(n, {}, chunk=batch_size), busy_us=50.0)
    handle = es.Runner(threads=threads, elastic=False, batch_size=batch_size, max_queue_size=16).start(flow)
    loop = ElasticLoop(handle, Elastic(period_s=0.01), [ScriptedThreads(FusionPlan.of(flow), levels)],
                       Levels(threads=(threads,), fused=handle.fused))
    loop.start()
    try:
        result = handle.wait(timeout=60)
    finally:
        loop.stop()
    unfused = es.Runner(threads=1, elastic=False, scheduling=es.SchedulingConfig(fuse=False)).run(
        build([("busy", 0), *stages], Gated(n, {})), timeout=60)
    assert result.outputs["out"] == unfused.outputs["out"] == reference(stages, list(range(n)))
    assert tuple_counts(result) == tuple_counts(unfused)
    assert loop.error is None
    assert all(a.ok or a.why for a in loop.timeline.decisions())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.lists(st.tuples(st.sampled_from(STAGES), st.integers(0, 3)), min_size=2, max_size=5),
       n=st.integers(200, 2000), levels=st.lists(st.integers(1, 2), min_size=2, max_size=5),
       batch_size=st.sampled_from([4, 16]))
def test_the_fusion_rule_in_a_worker_process_keeps_the_sequential_run(stages, n, levels, batch_size):
    # The chain runs in process 1; its thread level changes at random and the rule regroups it over the
    # control channel, from process 1's own plan.
    flow = build([("busy", 0), *stages], Gated(n, {}, chunk=batch_size), busy_us=50.0)
    placement = {name: 0 if name == "src" else 1 for name in flow.operators}
    handle = es.Runner(processes=2, threads=1, elastic=False, batch_size=batch_size, max_queue_size=16,
                       placement=placement).start(flow)
    plans = controller_for(handle, Elastic()).fusion.plans
    loop = ElasticLoop(handle, Elastic(period_s=0.02), [ScriptedThreads(list(plans), levels, process=1)],
                       Levels(threads=(1, 1), fused=handle.fused))
    loop.start()
    try:
        result = handle.wait(timeout=60)
    finally:
        loop.stop()
    assert result.outputs["out"] == reference([("busy", 0), *stages], list(range(n)))
    assert loop.error is None
    assert all(a.ok or a.why for a in loop.timeline.decisions())
