"""cumulative_selectivities (policies.features): no recursion over the graph, loops end, and the values
are those of the former recursive definition (kept here as the reference)."""

from __future__ import annotations

import random

import pytest

from elastream.metrics.period import OperatorPeriod, PeriodStats
from elastream.policies.features import cumulative_selectivities

pytestmark = pytest.mark.timeout(30)


def operator(name: str, selectivity: float, sends_to: list[str]) -> OperatorPeriod:
    return OperatorPeriod(name=name, kind="stateless", tuples_in=1000, tuples_out=round(1000 * selectivity),
                          busy_s=0.1, cpu_s=0.1, read_blocked_s=0.0, write_blocked_s=0.0, queue_length=0,
                          write_blocked_ratio=0.0, sent={d: 1 for d in sends_to})


def period(edges: dict[str, list[str]], selectivity: dict[str, float] | None = None) -> PeriodStats:
    sel = selectivity or {}
    return PeriodStats(start_s=0.0, period_s=0.1,
                       operators={n: operator(n, sel.get(n, 1.0), dsts) for n, dsts in edges.items()})


def recursive_reference(p: PeriodStats) -> dict[str, float]:
    """The definition as it was written before (one recursive call per publisher)."""
    ops = p.operators
    upstream: dict[str, list[str]] = {name: [] for name in ops}
    for name, op in ops.items():
        for dst in op.sent:
            if dst in upstream:
                upstream[dst].append(name)
    memo: dict[str, float] = {}

    def cs(name: str) -> float:
        if name in memo:
            return memo[name]
        memo[name] = 1.0
        ups = upstream[name]
        base = sum(cs(u) for u in ups) / len(ups) if ups else 1.0
        memo[name] = base * ops[name].selectivity
        return memo[name]

    for name in ops:
        cs(name)
    return memo


def test_a_5000_operator_chain_needs_no_recursion():
    names = [f"op{i}" for i in range(5000)]
    edges = {a: [b] for a, b in zip(names, names[1:])} | {names[-1]: []}
    sel = {n: (0.5 if i % 1000 == 1 else 1.0) for i, n in enumerate(names)}
    cs = cumulative_selectivities(period(edges, sel))
    assert len(cs) == 5000
    assert cs["op0"] == 1.0
    assert cs["op1"] == pytest.approx(0.5)
    assert cs["op4999"] == pytest.approx(0.5 ** 5)


def test_a_chain_listed_sink_first_gives_the_same_products():
    names = [f"op{i}" for i in range(3000)]
    edges = {b: [] for b in reversed(names)}
    for a, b in zip(names, names[1:]):
        edges[a] = [b]
    cs = cumulative_selectivities(period(edges, {"op1": 0.1}))
    assert cs["op2999"] == pytest.approx(0.1)


def test_a_feedback_loop_ends_and_counts_the_loop_back_as_one():
    # src -> loop -> step -> sink, and step -> loop (a control input): loop's publishers are src and step.
    edges = {"src": ["loop"], "loop": ["step"], "step": ["loop", "sink"], "sink": []}
    cs = cumulative_selectivities(period(edges, {"loop": 0.5, "step": 0.5}))
    # step's publisher loop is in progress when step is reached from it, so it counts 1: step = 0.5;
    # loop = mean(src 1, step 0.5) × 0.5 = 0.375; sink = step's 0.5.
    assert cs == pytest.approx({"src": 1.0, "loop": 0.375, "step": 0.5, "sink": 0.5})
    assert cs == pytest.approx(recursive_reference(period(edges, {"loop": 0.5, "step": 0.5})))


def test_a_diamond_averages_its_publishers():
    edges = {"src": ["a", "b"], "a": ["join"], "b": ["join"], "join": []}
    cs = cumulative_selectivities(period(edges, {"a": 0.2, "b": 0.6}))
    assert cs["join"] == pytest.approx(0.4)


@pytest.mark.parametrize("seed", range(40))
def test_same_values_as_the_recursive_definition_on_small_graphs_with_loops(seed):
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(2, 12))]
    rng.shuffle(names)
    edges = {n: rng.sample(names, rng.randint(0, min(3, len(names)))) for n in names}
    sel = {n: rng.choice([0.1, 0.5, 1.0, 2.0]) for n in names}
    p = period(edges, sel)
    assert cumulative_selectivities(p) == pytest.approx(recursive_reference(p))
