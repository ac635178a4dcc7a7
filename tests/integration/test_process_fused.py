"""Fused chains in multi-process runs: every member counted as in a threads run, and the chains named.

An elastic ``Runner(processes=2)`` fuses each stateless chain into one operator
replicated across the processes (``"a+b+c#0"``, ``"a+b+c#1"``, elastic.units;
here all replicas take work from the first tuple on); a
plain multi-process run fuses chains inside each part. Either way
``handle.stats()`` lists every member with its own tuple counts (summed over the
replicas), equal to those of an unfused run, ``handle.fused`` names the chains,
and the controllers' view still sizes the replicated chain by its unit name.
"""

from __future__ import annotations

import itertools
import threading

import pytest

import elastream as es
from elastream.elastic.view import flow_view
from elastream.metrics.period import period_between
from elastream.runtime.decisions import SetReplicas

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

N = 20_000
MEMBERS = ["a", "b", "c", "d", "e"]
UNFUSED = es.SchedulingConfig(fuse=False)
#: Where each operator runs in the plain two-process runs: chain a → b → c in the worker, d → e in the parent.
PLACEMENT = {"src": 0, "a": 1, "b": 1, "c": 1, "sum": 0, "d": 0, "e": 0, "out": 0}


def inc(x):
    return x + 1


def odd_thirds(x):
    return x % 3 != 0


def add(acc, x):
    return acc + x


def value(kv):
    return kv[1]


def pipeline(source=None) -> es.Flow:
    """src → a → b → c (a stateless chain) → sum (keyed) → d → e (another chain) → out."""
    flow = es.Flow("fused-procs")
    (flow.source(range(N) if source is None else source, name="src")
         .map(inc, name="a").filter(odd_thirds, name="b").map(inc, name="c")
         .key_by(lambda x: x % 7).reduce(add, initial=int, name="sum")
         .map(value, name="d").map(inc, name="e").sink(es.ops.Collect(), name="out"))
    return flow


def replicated(**elastic) -> es.RunHandle:
    """An elastic two-process run of :func:`pipeline` whose units all take work in both processes before
    the first tuple: ``Runner(processes=2)`` starts each whole in one process (elastic.held.placed_plan)."""
    gate = threading.Event()

    def gated():
        gate.wait(30.0)
        yield from range(N)

    handle = es.Runner(processes=2, **elastic).start(pipeline(gated()))
    try:
        applied = handle.submit([SetReplicas(unit, 2, reason="test") for unit in ("a+b+c", "sum", "d+e")])
        assert all(a.ok for a in applied), [a.why for a in applied]
    finally:
        gate.set()
    return handle


def counts(stats) -> dict[str, tuple[int, int]]:
    return {m: (stats.operators[m].tuples_in, stats.operators[m].tuples_out) for m in MEMBERS}


def test_fused_and_unfused_process_runs_count_every_member_alike():
    reference = es.Runner(threads=1, elastic=False, scheduling=UNFUSED).run(pipeline(), timeout=60)
    handle = replicated()                                       # chains fused into replicated units
    units = handle.wait(90)
    part_fused = es.Runner(processes=2, elastic=False, placement=PLACEMENT).run(pipeline(), timeout=90)
    unfused = es.Runner(processes=2, elastic=False, placement=PLACEMENT, scheduling=UNFUSED).run(
        pipeline(), timeout=90)
    expected = counts(reference.stats)
    assert expected["a"] == (N, N) and expected["b"][1] < N
    for result in (units, part_fused, unfused):
        assert result.outputs["out"] == reference.outputs["out"]
        assert counts(result.stats) == expected
    # The backend's own statistics (what the controllers read) keep the replicas, which DS2 sizes by the
    # unit's name; the members follow them.
    names = list(handle.inner.stats().operators)
    assert {"a+b+c#0", "a+b+c#1", "d+e#0", "d+e#1"} <= set(names)
    assert names.index("a") > names.index("a+b+c#1") and names[names.index("a"):names.index("a") + 3] == \
        ["a", "b", "c"]
    # Each member is summed over the parts that ran a replica of its chain.
    parts = [p for p in handle.part_stats() if p is not None and "a" in p.operators]
    assert sum(p.operators["a"].tuples_in for p in parts) == N
    ops = handle.inner.stats().operators
    assert ops["a"].sent == {"b": N} and ops["c"].sent == {"a+b+c#merge": expected["c"][1]}
    replicas_busy = ops["a+b+c#0"].busy_s + ops["a+b+c#1"].busy_s
    assert sum(ops[m].busy_s for m in "abc") == pytest.approx(replicas_busy, rel=1e-6, abs=1e-9)


def test_a_process_run_names_its_fused_chains():
    handle = es.Runner(processes=2).start(pipeline())
    try:
        assert handle.fused == (("a", "b", "c"), ("d", "e"))      # the units elastic.units fused before the run
        assert handle.loop.levels.fused == handle.fused
    finally:
        handle.wait(90)
    plain = es.Runner(processes=2, elastic=False, placement=PLACEMENT).start(pipeline())
    try:
        assert set(plain.fused) == {("a", "b", "c"), ("d", "e")}  # each part's own: process 1's, process 0's
        assert plain._local.handle.fused == (("d", "e"),)         # what part 0 compiled itself
    finally:
        plain.wait(90)
    apart = es.Runner(processes=2, elastic=False, placement=PLACEMENT, scheduling=UNFUSED).start(pipeline())
    try:
        assert apart.fused == ()
    finally:
        apart.wait(90)


def test_the_controllers_view_sizes_the_replicated_chain_by_its_unit_name():
    handle = replicated(elastic=es.Elastic(controller="ds2", period_s=10))
    handle.wait(90)
    stats = handle.inner.stats()                                # what the elastic loop reads
    view = flow_view(period_between(None, stats), handle.loop.levels)
    assert "a" not in view.units and "d" not in view.units      # the members belong to their unit
    chain = view.units["a+b+c"]
    assert chain.instances == 2 and chain.processed == counts(stats)["c"][1]
    assert chain.downstream == {"sum": counts(stats)["c"][1]}


def test_a_running_process_run_lists_the_members_of_its_replicated_chains(wait_until):
    handle = es.Runner(processes=2, elastic=es.Elastic(controller="ds2", period_s=10)).start(
        pipeline(itertools.count()))
    try:
        wait_until(lambda: handle.stats().operators["c"].tuples_out > 1000, timeout=30, what="c's output")
        stats = handle.inner.stats()
        assert {"a", "b", "c", "a+b+c#0", "a+b+c#1"} <= set(stats.operators)
        assert stats.operators["a"].tuples_out == stats.operators["b"].tuples_in
        assert stats.operators["a"].state in ("running", "read_blocked", "write_blocked", "ready")
    finally:
        handle.shutdown(timeout=10)


def test_a_chain_fused_before_the_run_but_not_replicated_is_listed_as_its_members():
    from elastream.elastic.units import fuse_chains

    flow = fuse_chains(pipeline())                               # a+b+c and d+e are one operator each
    placement = {"src": 0, "a+b+c": 1, "sum": 0, "d+e": 1, "out": 0}
    handle = es.Runner(processes=2, elastic=False, placement=placement).start(flow)
    result = handle.wait(90)
    assert handle.fused == (("a", "b", "c"), ("d", "e"))
    assert list(result.stats.operators) == ["src", "a", "b", "c", "sum", "d", "e", "out"]
    reference = es.Runner(threads=1, elastic=False, scheduling=UNFUSED).run(pipeline(), timeout=60)
    assert counts(result.stats) == counts(reference.stats)
