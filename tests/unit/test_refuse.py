"""Fusing and un-fusing chains of a running flow (runtime.refuse), the loop's support and the fusion rule.

A regroup must keep the sequential output and every operator's tuple counts,
carry each member's statistics over (never backwards), keep naming the member
that raised, refuse what it cannot do with a reason, and never keep a run from
shutting down. The fusion rule is checked on synthetic levels and periods.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

import elastream as es
from elastream.elastic.combined import CombinedController
from elastream.elastic.config import Elastic
from elastream.elastic.fusion_rule import RETRY_PERIODS, FusionPlan, FusionRule
from elastream.elastic.loop import ElasticLoop, is_supported, levels_after
from elastream.metrics.period import OperatorPeriod, PeriodStats
from elastream.runtime import refuse
from elastream.runtime.decisions import Applied, Fuse, Levels, SetReplicas, SetThreads, Unfuse
from gated_source import Gated

CHAIN = ("a", "b", "slow", "c", "d")
GATE_WAIT_S = 20.0


def chain_flow(items, fail_at: int | None = None) -> es.Flow:
    """src → a → b → slow → c → d → out; ``slow`` (a Busy) takes one worker at a time; b may raise."""
    def double(x):
        if x == fail_at:
            raise ValueError(f"bad record {x}")
        return x * 2

    flow = es.Flow("regroup")
    source = items if isinstance(items, es.Operator) else es.ops.FromIterable(items)
    (flow.source(source, name="src").map(lambda x: x + 1, name="a").map(double, name="b")
     .then(es.ops.Busy(2.0, seed=1), name="slow").filter(lambda x: x % 3, name="c").map(lambda x: x - 1, name="d")
     .sink(es.ops.Collect(), name="out"))
    return flow


def expected(n: int) -> list[int]:
    return [(x + 1) * 2 - 1 for x in range(n) if ((x + 1) * 2) % 3]


def counts(stats) -> dict[str, tuple[int, int]]:
    return {name: (op.tuples_in, op.tuples_out) for name, op in stats.operators.items()}


def start(items, threads: int = 1, **kw):
    return es.Runner(threads=threads, elastic=False, batch_size=8, max_queue_size=32).start(chain_flow(items, **kw))


def plain_counts(n: int) -> dict[str, tuple[int, int]]:
    runner = es.Runner(threads=1, elastic=False, scheduling=es.SchedulingConfig(fuse=False))
    return counts(runner.run(chain_flow(range(n)), timeout=60).stats)


# -- the mechanism ------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2])
def test_unfuse_and_fuse_back_mid_run_keep_the_output_and_the_counts(threads):
    n = 3000
    gates = {600: threading.Event(), 1800: threading.Event()}
    handle = start(Gated(n, gates), threads)
    # One thread fuses the whole chain, and un-fusing it then takes it fully apart; on two, slow (one worker at a
    # time) runs alone beside its neighbours, and un-fusing the whole chain comes back to that.
    alone = ((CHAIN,), ()) if threads == 1 else ((("a", "b"), ("c", "d")), (("a", "b"), ("c", "d")))
    try:
        assert handle.fused == alone[0]
        steps = [(Fuse(CHAIN), (CHAIN,))] if threads > 1 else []
        steps += [(Unfuse(CHAIN, reason="test"), alone[1]), (Fuse(CHAIN), (CHAIN,))]
        for i, (decision, fused) in enumerate(steps):
            [applied] = handle.submit([decision])
            assert (applied.ok, applied.why) == (True, "")
            assert handle.fused == fused
            if i == 1:
                gates[600].set()
    finally:
        for gate in gates.values():
            gate.set()
    result = handle.wait(timeout=60)
    assert result.outputs["out"] == expected(n)
    assert counts(result.stats) == plain_counts(n)
    assert set(handle.states()) == {"src", *CHAIN, "out"}


def test_a_fuse_carries_what_waited_inside_the_chain_into_the_new_task(wait_until):
    """Two threads: c holds a worker while slow (one worker at a time) and a → b fill the ports before them.
    Fusing the four makes one task of one worker, which first runs what waited inside, oldest first."""
    entered, leave = threading.Event(), threading.Event()

    def hold(x):
        if x == 50:
            entered.set()
            leave.wait(GATE_WAIT_S)
        return x - 1

    n = 3000
    flow = es.Flow("carry")
    (flow.source(range(n), name="src").map(lambda x: x + 1, name="a").map(lambda x: x * 2, name="b")
     .then(es.ops.Busy(1.0, seed=1), name="slow").map(hold, name="c").sink(es.ops.Collect(), name="out"))
    handle = es.Runner(threads=2, elastic=False, batch_size=4, max_queue_size=8).start(flow)
    answers: list[Applied] = []
    try:
        assert entered.wait(GATE_WAIT_S) and handle.fused == (("a", "b"),)
        wait_until(lambda: handle.states()["slow"] == "write_blocked", what="slow to fill c's port")
        submitter = threading.Thread(target=lambda: answers.extend(handle.submit([Fuse(("a", "b", "slow", "c"))])))
        submitter.start()
        wait_until(lambda: handle.sched.regrouping, what="the fuse to wait for c's worker")
    finally:
        leave.set()
    submitter.join(GATE_WAIT_S)
    assert [(a.ok, a.why) for a in answers] == [(True, "")]
    assert [type(t).__name__ for t in handle.sched.tasks if t.name == "a+b+slow+c"] == ["CarryingTask"]
    result = handle.wait(timeout=60)
    assert result.outputs["out"] == [(x + 1) * 2 - 1 for x in range(n)]
    assert counts(result.stats)["c"] == (n, n) and counts(result.stats)["slow"] == (n, n)


def test_statistics_carry_over_the_switch(wait_until):
    """Source held at a gate, one thread: nothing moves, so each member's statistics are the same either side."""
    gate = threading.Event()
    handle = start(Gated(2000, {1000: gate}))
    try:
        # The one worker waits in the source once the sink has what came before the gate: all else is idle.
        # A task's busy time is added when its worker leaves it, so every one must be waiting again too.
        wait_until(lambda: handle.stats().operators["out"].tuples_in == len(expected(1000))
                   and all(state == "read_blocked" for name, state in handle.states().items() if name != "src"),
                   what="the chain idle")
        before = handle.stats().operators
        handle.submit([Unfuse(CHAIN)])
        middle = handle.stats().operators
        handle.submit([Fuse(("c", "d")), Fuse(CHAIN)])
        after = handle.stats().operators
    finally:
        gate.set()
    handle.wait(timeout=60)
    for name in CHAIN:
        for seen in (middle, after):
            assert (seen[name].tuples_in, seen[name].tuples_out) == (before[name].tuples_in, before[name].tuples_out)
            assert seen[name].busy_s == pytest.approx(before[name].busy_s, rel=1e-6, abs=1e-9)
    assert middle["b"].sent == {"slow": before["b"].tuples_out}
    assert middle["slow"].inputs[0].writes == before["slow"].tuples_in


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fuse_back", [False, True])
def test_an_error_after_a_regroup_names_the_member(threads, fuse_back):
    gate = threading.Event()
    handle = start(Gated(3000, {300: gate}), threads, fail_at=1500)
    decisions = ([Fuse(CHAIN)] if threads > 1 else []) + [Unfuse(CHAIN)] + ([Fuse(CHAIN)] if fuse_back else [])
    try:
        for decision in decisions:
            assert handle.submit([decision])[0].ok
    finally:
        gate.set()
    with pytest.raises(es.OperatorError) as info:
        handle.wait(timeout=60)
    assert info.value.operator == "b"
    assert "bad record 1500" in str(info.value)


def test_what_cannot_be_regrouped_is_refused_with_the_reason():
    gate = threading.Event()
    handle = start(Gated(500, {100: gate}))
    try:
        assert handle.submit([Unfuse(("a", "b"))])[0].why == (
            "no running fused chain is a → b (fused now: a → b → slow → c → d)")
        assert handle.submit([Fuse(CHAIN)])[0].why == "the chain already runs as one task"
        handle.submit([Unfuse(CHAIN)])
        why = handle.submit([Fuse(("d", "out"))])[0].why
        assert why == "cannot fuse d → out: 'out' is not a stateless function operator with one input and one output"
        assert handle.submit([Fuse(("a", "c"))])[0].why.startswith("cannot fuse a → c: 'a' → 'c' is not the only link")
        assert handle.submit([Fuse(("a", "zz"))])[0].why == "cannot fuse a → zz: no operator 'zz' runs"
        handle.submit([Fuse(("a", "b", "slow"))])
        assert handle.submit([Fuse(("b", "slow", "c"))])[0].why == (
            "cannot fuse b → slow → c: its operators are not whole tasks in flow order (a → b → slow runs as one task)")
        assert handle.fused == (("a", "b", "slow"),)
    finally:
        gate.set()
    assert handle.wait(timeout=60).outputs["out"] == expected(500)


def test_a_chain_that_ended_is_not_regrouped():
    handle = start(range(100))
    handle.wait(timeout=60)
    [applied] = handle.submit([Unfuse(CHAIN)])
    assert not applied.ok and applied.why == "a → b → slow → c → d has reached the end of its stream"
    assert handle.fused == (CHAIN,)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("how", ["shutdown", "error"])
def test_a_shutdown_or_an_error_while_an_unfuse_waits_ends_the_run_cleanly(threads, how, wait_until):
    """A worker is inside the chain (held in b by the test): the un-fuse waits; a shutdown, or b raising, ends both."""
    entered, leave = threading.Event(), threading.Event()

    def hold(x):
        if x == 50:
            entered.set()
            leave.wait(GATE_WAIT_S)
            if how == "error":
                raise ValueError("b gave up")
        return x

    flow = es.Flow("held")
    (flow.source(range(100_000), name="src").map(abs, name="a").map(hold, name="b").map(abs, name="c")
     .sink(es.ops.Collect(), name="out"))
    handle = es.Runner(threads=threads, elastic=False, batch_size=8, max_queue_size=32).start(flow)
    answers: list[Applied] = []
    try:
        assert entered.wait(GATE_WAIT_S)
        submitter = threading.Thread(target=lambda: answers.extend(handle.submit([Unfuse(("a", "b", "c"))])))
        submitter.start()
        wait_until(lambda: handle.sched.regrouping, what="the un-fuse to wait for its safe point")
        if how == "shutdown":
            handle.request_shutdown()
        else:
            leave.set()
        submitter.join(GATE_WAIT_S)
        assert not submitter.is_alive()
    finally:
        leave.set()
    if how == "shutdown":
        assert handle.wait(timeout=30).shutdown
    else:
        with pytest.raises(es.OperatorError) as info:
            handle.wait(timeout=30)
        assert info.value.operator == "b" and "b gave up" in str(info.value)
    assert [(a.ok, a.why) for a in answers] == [(False, "the run is shutting down")]
    assert handle.fused == (("a", "b", "c"),)
    assert not any(w.alive for w in handle.pool.workers)


def test_a_regroup_that_finds_no_safe_point_in_time_changes_nothing(monkeypatch):
    """A worker stays inside the chain past the timeout: the un-fuse is refused and the run goes on unchanged."""
    monkeypatch.setattr(refuse, "REGROUP_TIMEOUT_S", 0.2)
    entered, leave = threading.Event(), threading.Event()

    def hold(x):
        if x == 50:
            entered.set()
            leave.wait(GATE_WAIT_S)
        return x

    flow = es.Flow("stuck")
    (flow.source(range(2000), name="src").map(abs, name="a").map(hold, name="b").sink(es.ops.Collect(), name="out"))
    handle = es.Runner(threads=1, elastic=False, batch_size=8, max_queue_size=32).start(flow)
    try:
        assert entered.wait(GATE_WAIT_S)
        [applied] = handle.submit([Unfuse(("a", "b"))])
    finally:
        leave.set()
    assert (applied.ok, applied.why) == (False, "no safe point: waited 0.2 s for a worker to leave it")
    assert handle.wait(timeout=30).outputs["out"] == list(range(2000))
    assert handle.fused == (("a", "b"),) and not handle.sched.held


# -- the elastic loop ----------------------------------------------------------------------------------
def test_the_loop_applies_fusion_in_one_process_and_folds_it_into_the_levels():
    assert is_supported(Unfuse(CHAIN), Levels(threads=(2,)))
    assert is_supported(Fuse(CHAIN), Levels(threads=(2, 2)))  # the run hands it to the chain's process
    assert not is_supported(Fuse(CHAIN), Levels(threads=(2, 2), held=True))
    levels = Levels(threads=(2,), fused=(("x", "y"), CHAIN))
    applied = [Applied(Unfuse(CHAIN), 0.0, True), Applied(Fuse(("a", "b")), 0.0, True),
               Applied(Fuse(("c", "d")), 0.0, False, "no")]
    assert levels_after(levels, applied).fused == (("x", "y"), ("a", "b"))
    # A chain fused over smaller ones takes the place of the first of them.
    again = levels_after(Levels(fused=(("a", "b"), ("x", "y"), ("c", "d"))), [Applied(Fuse(CHAIN), 0.0, True)])
    assert again.fused == (CHAIN, ("x", "y"))
    assert levels_after(levels, [Applied(SetReplicas("a", 2), 0.0, True)]).fused == levels.fused


class _Scripted:
    """Sets the thread level given for each step, beside the fusion rule (as the combined controller does)."""

    name = "scripted"

    def __init__(self, plan: FusionPlan, threads: list[int]):
        self.rule = FusionRule(plan)
        self.threads = threads

    def decide(self, period, levels, machine):
        level = self.threads.pop(0)
        ups = [SetThreads(level, reason="scripted")] if level != levels.threads[0] else []
        return ups + self.rule.decide(period, levels, machine)


def test_the_rule_in_a_loop_follows_the_thread_level_on_a_running_flow():
    n = 4000
    gates = {i: threading.Event() for i in (500, 1500, 2500)}
    flow = chain_flow(Gated(n, gates))
    handle = es.Runner(threads=1, elastic=False, batch_size=8, max_queue_size=32).start(flow)
    loop = ElasticLoop(handle, Elastic(period_s=0.5), [_Scripted(FusionPlan.of(flow), [2, 2, 1, 1])],
                       Levels(threads=(1,), fused=handle.fused))
    try:
        for i in (500, 1500, 2500):
            loop.step(handle.stats())
            assert loop.levels.fused == handle.fused
            gates[i].set()
        loop.step(handle.stats())
    finally:
        for gate in gates.values():
            gate.set()
    result = handle.wait(timeout=60)
    assert result.outputs["out"] == expected(n)
    assert counts(result.stats) == plain_counts(n)
    made = [(type(a.decision).__name__, a.decision.chain, a.ok) for e in loop.timeline.entries for a in e.decisions
            if isinstance(a.decision, (Fuse, Unfuse))]
    assert made == [("Unfuse", CHAIN, True), ("Fuse", ("a", "b"), True), ("Fuse", ("c", "d"), True),
                    ("Fuse", CHAIN, True)]
    assert loop.levels.fused == handle.fused == (CHAIN,)


# -- the fusion rule --------------------------------------------------------------------------------------
PLAN = FusionPlan(one_thread=(CHAIN,), several_threads=(("a", "b"), ("c", "d")), single_worker=frozenset({"slow"}))


def period(*names: str) -> PeriodStats:
    ops = {n: OperatorPeriod(n, "stateless", 10, 10, 0.1, 0.1, 0.0, 0.0, 0, 0.0) for n in names}
    return PeriodStats(start_s=0.0, period_s=0.5, operators=ops)


def test_the_rule_unfuses_where_a_member_must_run_alone_and_fuses_back_at_one_thread():
    rule = FusionRule(PLAN)
    assert rule.decide(period(), Levels(threads=(1,), fused=(CHAIN,))) == []
    up = rule.decide(period(), Levels(threads=(2,), fused=(CHAIN,)))
    assert up == [Unfuse(CHAIN, reason="2 threads: slow takes one worker at a time, so it runs as a task of its own "
                                       "and its neighbours run beside it"),
                  Fuse(("a", "b"), reason="2 threads: a → b may run on several workers at once: one shared task"),
                  Fuse(("c", "d"), reason="2 threads: c → d may run on several workers at once: one shared task")]
    assert rule.decide(period(), Levels(threads=(3,), fused=(("a", "b"), ("c", "d")))) == []
    down = rule.decide(period(), Levels(threads=(1,), fused=(("a", "b"), ("c", "d"))))
    assert down == [Fuse(CHAIN, reason="1 thread: a → b → slow → c → d runs as one task again "
                                       "(one buffer hop for the whole chain)")]


def test_the_rule_retries_a_refused_fusion_after_a_few_periods():
    rule = FusionRule(PLAN)
    levels = Levels(threads=(1,), fused=())
    assert [type(d) for d in rule.decide(period(), levels)] == [Fuse]
    for _ in range(RETRY_PERIODS - 1):
        assert rule.decide(period(), levels) == []      # refused (the levels did not change): wait
    assert [type(d) for d in rule.decide(period(), levels)] == [Fuse]


OTHER = FusionPlan(one_thread=(("x", "y"),), several_threads=(("x", "y"),), operators=frozenset({"x", "y"}))


def test_the_rule_plans_each_process_apart_and_stays_out_of_held_runs():
    mine = replace(PLAN, operators=frozenset(CHAIN))
    rule = FusionRule([mine, OTHER])
    assert rule.decide(period(), Levels(threads=(1, 2), fused=(CHAIN, ("x", "y")))) == []
    # Process 0 goes to 2 threads: its chain comes apart; process 1's chain is not touched.
    decided = rule.decide(period(), Levels(threads=(2, 2), fused=(CHAIN, ("x", "y"))))
    assert [(type(d).__name__, d.chain) for d in decided] == [("Unfuse", CHAIN), ("Fuse", ("a", "b")),
                                                              ("Fuse", ("c", "d"))]
    # Process 1's chain came apart (e.g. refused at start): only its own plan proposes it again.
    assert rule.decide(period(), Levels(threads=(2, 2), fused=(("a", "b"), ("c", "d")))) == [
        Fuse(("x", "y"), reason="2 threads: x → y may run on several workers at once: one shared task")]
    # A part with nothing to fuse leaves the chains fused before the run (elastic.units) alone.
    empty = FusionRule([mine, FusionPlan(operators=frozenset())])
    assert empty.decide(period(), Levels(threads=(1, 2), fused=(CHAIN, ("u", "v")))) == []
    held = FusionRule([mine, OTHER])
    assert held.decide(period(), Levels(threads=(2, 2), fused=(CHAIN,), held=True)) == []


def test_the_rule_leaves_alone_operators_it_does_not_see():
    rule = FusionRule(PLAN)
    # A period naming other operators (a unit of another backend): no Fuse of what it does not see.
    assert rule.decide(period("src", "a+b", "out"), Levels(threads=(1,), fused=())) == []


def test_the_plan_of_a_flow_and_of_a_flow_without_fusion():
    flow = chain_flow(range(10))
    assert FusionPlan.of(flow) == replace(PLAN, operators=frozenset(CHAIN))
    assert FusionPlan.of(flow, fuse=False) == FusionPlan(operators=frozenset())  # covers no chain
    combined = CombinedController(fusion=PLAN)
    assert isinstance(combined.fusion, FusionRule) and CombinedController().fusion is None
