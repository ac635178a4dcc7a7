"""Operator fusion (runtime.fusion): which chains fuse, and that a fused run looks like an unfused one.

A fused chain must give the same outputs and the same per-operator tuple
counts as one task per operator, name the member that raised, run the
members' end-of-stream hooks in order, and leave every operator visible in
the statistics, ``handle.operator(name)`` and the results.
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.operators.base import FunctionOperator
from elastream.runtime.compile import compile_flow
from elastream.runtime.fusion import SAMPLE_EVERY, FusedChain, chain_spec, plan_steps


def runner(threads: int, fuse: bool, **kw) -> es.Runner:
    return es.Runner(threads=threads, elastic=False, scheduling=es.SchedulingConfig(fuse=fuse), **kw)


def compiled_chains(flow: es.Flow, fuse: bool = True) -> tuple[tuple[str, ...], ...]:
    return compile_flow(flow, max_queue_size=64, batch_size=16, fuse=fuse).fused


def mixed_flow(n: int = 500) -> es.Flow:
    """src → inc → odd → dup → out: a map, a filter and a flat map between a source and a sink."""
    flow = es.Flow("mixed")
    (flow.source(range(n), name="src").map(lambda x: x + 1, name="inc").filter(lambda x: x % 3, name="odd")
     .flat_map(lambda x: [x, -x], name="dup").sink(es.ops.Collect(), name="out"))
    return flow


def counts(result: es.RunResult) -> dict[str, tuple[int, int]]:
    return {name: (op.tuples_in, op.tuples_out) for name, op in result.stats.operators.items()}


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_and_unfused_runs_agree_on_outputs_and_counts(threads):
    fused = runner(threads, True, batch_size=16, max_queue_size=64).start(mixed_flow())
    fused_result = fused.wait(timeout=30)
    plain = runner(threads, False, batch_size=16, max_queue_size=64).run(mixed_flow(), timeout=30)
    assert fused.fused == (("inc", "odd", "dup"),)
    assert fused_result.outputs["out"] == plain.outputs["out"]
    assert counts(fused_result) == counts(plain)
    assert list(fused_result.stats.operators) == list(plain.stats.operators)


def test_every_member_reports_its_own_statistics():
    handle = runner(1, True, batch_size=16, max_queue_size=64).start(mixed_flow(2000))
    result = handle.wait(timeout=30)
    ops = result.stats.operators
    assert ops["inc"].sent == {"odd": 2000} and ops["odd"].sent == {"dup": ops["odd"].tuples_out}
    assert ops["dup"].sent == {"out": ops["out"].tuples_in}
    assert ops["src"].sent == {"inc": 2000}       # a fused consumer's input is its first member's
    assert all(ops[name].busy_s > 0 for name in ("inc", "odd", "dup"))
    assert ops["odd"].inputs[0].operator == "odd" and ops["odd"].inputs[0].writes == 2000
    assert ops["inc"].inputs[0].operator == "inc"
    assert set(handle.states()) == {"src", "inc", "odd", "dup", "out"}
    assert isinstance(handle.operator("odd"), es.ops.Filter)


def composed_flow(n: int, fail_at: int | None = None) -> es.Flow:
    """src → a → b → c → out, three Maps (composed into one call per tuple); b may raise on one record."""
    def check(x):
        if x == fail_at:
            raise ValueError(f"bad record {x}")
        return x * 2

    flow = es.Flow("composed")
    (flow.source(range(n), name="src").map(lambda x: x + 1, name="a").map(check, name="b")
     .map(lambda x: x - 1, name="c").sink(es.ops.Collect(), name="out"))
    return flow


@pytest.mark.parametrize("threads", [1, 2])
def test_composed_maps_count_and_time_every_member(threads):
    n = 16 * (SAMPLE_EVERY + 4)                   # batches past the first sampled one run composed
    result = runner(threads, True, batch_size=16, max_queue_size=64).run(composed_flow(n), timeout=30)
    assert result.outputs["out"] == [2 * (x + 1) - 1 for x in range(n)]
    ops = result.stats.operators
    assert [ops[m].tuples_in for m in "abc"] == [n, n, n] and [ops[m].tuples_out for m in "abc"] == [n, n, n]
    assert all(ops[m].busy_s > 0 for m in "abc")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fail_at", [5, 16 * (SAMPLE_EVERY // 2)])  # the first (sampled) batch, a composed one
def test_an_error_inside_a_fused_chain_names_the_member(threads, fail_at):
    with pytest.raises(es.OperatorError) as info:
        runner(threads, True, batch_size=16, max_queue_size=64).run(composed_flow(16 * SAMPLE_EVERY, fail_at),
                                                                     timeout=30)
    error = info.value
    assert error.operator == "b"
    cause = error.__cause__ or getattr(error, "cause", None)
    assert isinstance(cause, ValueError) and str(cause) == f"bad record {fail_at}"
    notes = getattr(cause, "__notes__", ())
    assert any(note.endswith(f"record {fail_at}") for note in notes), notes   # b's own input, not the chain's


class Tagged(FunctionOperator):
    """A stateless operator that tags each tuple, emits ``end`` when its input closes and records its context."""

    def __init__(self, tag: str):
        super().__init__(inputs=1, outputs=1)
        self.tag = tag
        self.seen_name = None

    def open(self, ctx) -> None:
        self.seen_name = ctx.name

    def on_batch(self, items, port):
        return [f"{x}{self.tag}" for x in items]

    def on_inputs_closed(self):
        return [f"end{self.tag}"]

    def result(self):
        return self.seen_name


def tagged_flow() -> es.Flow:
    flow = es.Flow("tagged")
    src = flow.add(es.ops.FromIterable(range(3)), name="src")
    t1, t2, t3 = (flow.add(Tagged(tag), name=f"t{tag}") for tag in "123")
    src >> t1 >> t2 >> t3 >> flow.add(es.ops.Collect(), name="out")
    return flow


def test_end_of_stream_runs_member_after_member_and_feeds_the_next():
    fused = runner(1, True).start(tagged_flow())
    result = fused.wait(timeout=30)
    plain = runner(1, False).run(tagged_flow(), timeout=30)
    assert fused.fused == (("t1", "t2", "t3"),)
    assert result.outputs["out"] == plain.outputs["out"]
    assert result.outputs["out"][-3:] == ["end123", "end23", "end3"]
    assert counts(result) == counts(plain)
    assert {m: result.outputs[m] for m in ("t1", "t2", "t3")} == {"t1": "t1", "t2": "t2", "t3": "t3"}


def test_fuse_false_keeps_one_task_per_operator():
    flow = mixed_flow()
    compiled = compile_flow(flow, max_queue_size=64, batch_size=16, fuse=False)
    assert compiled.fused == ()
    assert [t.name for t in compiled.tasks] == list(flow.operators)
    assert not any(isinstance(t.op, FusedChain) for t in compiled.tasks)
    handle = runner(1, False).start(mixed_flow())
    handle.wait(timeout=30)  # a started run is always finished: it holds the GC threshold and threads
    assert handle.fused == ()


def test_only_legal_parts_of_a_chain_fuse():
    """A keyed operator, a fan-out and a coroutine operator each end a chain; single operators stay alone."""
    flow = es.Flow("broken")
    s = flow.source(range(100), name="src").map(abs, name="a").filter(bool, name="b")
    s = s.key_by(lambda x: x % 4).reduce(lambda acc, x: acc + x, initial=int, name="sum")
    s = s.map(lambda kv: kv, name="c").map(lambda kv: kv, name="d")
    s.map(str, name="e").sink(es.ops.Collect(), name="out1")       # d fans out: to e ...
    s.sink(es.ops.Collect(), name="out2")                           # ... and to out2
    (flow.source(range(10), name="src2").map(abs, name="f").then(es.ops.Barrier(1), name="bar")
     .map(str, name="h").map(len, name="i").sink(es.ops.Collect(), name="out3"))
    assert compiled_chains(flow) == (("a", "b"), ("c", "d"), ("h", "i"))


def test_on_several_threads_only_members_several_workers_may_run_fuse():
    flow = es.Flow("bounded")
    (flow.source(range(10), name="src").map(abs, name="a").map(abs, name="b")
     .sink(es.ops.Collect(), name="out"))
    task = [t for t in compile_flow(flow, max_queue_size=8, batch_size=4, threads=2, fuse=True).tasks
            if isinstance(t.op, FusedChain)][0]
    assert task.shared
    flow = es.Flow("busy")
    (flow.source(range(10), name="src").map(abs, name="a").then(es.ops.Busy(1.0, seed=1), name="slow")
     .sink(es.ops.Collect(), name="out"))
    assert compiled_chains(flow) == (("a", "slow"),)                  # one thread: fused all the same
    # Busy keeps to one worker: on two threads it stays a task of its own, so it can run beside its neighbours.
    assert compile_flow(flow, max_queue_size=8, batch_size=4, threads=2, fuse=True).fused == ()


def test_runs_of_maps_are_composed_and_the_rest_run_stage_by_stage():
    ops = [es.ops.Map(abs), es.ops.Map(abs), es.ops.Filter(bool), es.ops.Map(abs), es.ops.Map(abs), es.ops.Map(abs),
           es.ops.FlatMap(list), es.ops.Map(abs)]
    assert plan_steps([op.spec() for op in ops]) == [(0, 2), (2, 1), (3, 3), (6, 1), (7, 1)]


def test_worker_processes_fuse_their_own_parts():
    """Each process compiles its part with fusion: outputs, counts and the failing member's name as unfused."""
    placement = {"src": 0, "a": 0, "b": 0, "c": 1, "out": 1}   # a→b fuse in process 0; c runs alone in 1
    n = 16 * (SAMPLE_EVERY + 4)
    fused = es.Runner(processes=2, elastic=False, placement=placement, batch_size=16).run(composed_flow(n), timeout=60)
    plain = runner(1, False, batch_size=16).run(composed_flow(n), timeout=60)
    assert fused.outputs["out"] == plain.outputs["out"] and counts(fused) == counts(plain)
    with pytest.raises(es.OperatorError) as info:
        es.Runner(processes=2, elastic=False, placement=placement, batch_size=16).run(composed_flow(n, 700),
                                                                                       timeout=60)
    assert info.value.operator == "b"


def test_a_chains_declared_cost_is_per_input_tuple():
    specs = [es.ops.Busy(10.0, selectivity=0.5).spec(), es.ops.Busy(4.0, selectivity=2.0).spec()]
    spec = chain_spec(specs)
    assert spec.cost_us == pytest.approx(10.0 + 4.0 * 0.5) and spec.selectivity == pytest.approx(1.0)
    assert spec.max_workers == 1 and chain_spec([es.ops.Map(abs).spec(), es.ops.Busy().spec()]).cost_us is None


def test_a_chain_the_flow_holds_as_one_operator_runs_and_reports_its_members():
    """A FusedChain placed in a flow as one operator (as an elastic run's replication units are) acts as fused."""
    members = [es.ops.Map(lambda x: x + 1), Tagged("!")]
    flow = es.Flow("held")
    src = flow.add(es.ops.FromIterable(range(3)), name="src")
    unit = flow.add(FusedChain(["inc", "tag"], members, [m.spec() for m in members]), name="inc+tag")
    src >> unit >> flow.add(es.ops.Collect(), name="out")
    handle = runner(1, True).start(flow)
    result = handle.wait(timeout=30)
    assert result.outputs["out"] == ["1!", "2!", "3!", "end!"]
    assert counts(result)["inc"] == (3, 3) and counts(result)["tag"] == (3, 4)
    assert handle.operator("inc+tag").members[1].seen_name == "tag"   # each member opened under its own name
    assert members[1].seen_name is None                                # the run worked on its own instances


def wide_groups(flow: es.Flow) -> tuple[tuple[str, ...], ...]:
    """What the manual model runs as one task each (fused wide, sources joined to their chains)."""
    return compile_flow(flow, max_queue_size=64, batch_size=16, fuse=True, wide=True).fused


def test_manual_model_joins_a_source_to_the_chain_or_the_operator_it_feeds():
    flow = es.Flow("joins")
    (flow.source(range(10), name="src").map(abs, name="a").key_by(lambda x: x % 2)
     .reduce(lambda acc, x: acc + x, initial=int, name="sum").sink(es.ops.Collect(), name="out"))
    flow.source(range(10), name="lone").sink(es.ops.Collect(), name="alone")   # one operator joins alone
    assert wide_groups(flow) == (("src", "a", "sum", "out"), ("lone", "alone"))
    tasks = compile_flow(flow, max_queue_size=64, batch_size=16, fuse=True, wide=True).tasks
    assert [(t.name, t.inputs, t.outputs) for t in tasks] == [("src+a+sum+out", [], []), ("lone+alone", [], [])]


def test_a_source_joins_only_an_operator_it_alone_feeds_through_its_one_output():
    flow = es.Flow("apart")
    fan = flow.source(range(10), name="fan")                          # two connections out: stays a task
    fan.map(abs, name="a").sink(es.ops.Collect(), name="out_a")
    fan.map(abs, name="b").sink(es.ops.Collect(), name="out_b")
    left = flow.source(range(10), name="left")                        # into a two-input union: stays a task
    left.union(flow.source(range(10), name="right"), name="both").sink(es.ops.Collect(), name="out_u")
    flow.source(range(10), name="pre").then(es.ops.Barrier(1), name="bar") \
        .sink(es.ops.Collect(), name="out_bar")                       # a coroutine operator is never fused
    assert wide_groups(flow) == (("a", "out_a"), ("b", "out_b"))
    assert compiled_chains(flow) == ()                                # never without wide fusion (threads)
