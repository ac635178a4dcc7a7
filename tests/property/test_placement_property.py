"""Property: on random DAGs (2-40 tasks, random weights and traffic, zero included) and 1-4
processes, every placement plan is a valid, self-consistent and deterministic assignment,
and consolidation's relational tree covers every task exactly once (TurboStream §V).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastream.placement import PlacementGraph, PlacementPlan, consolidate, consolidate_level, place, round_robin

pytestmark = pytest.mark.timeout(60)

SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def dags(draw: st.DrawFn) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Weights and traffic of a random DAG: edges only from a lower to a higher index."""
    n = draw(st.integers(2, 40))
    amount = st.one_of(st.just(0.0), st.floats(0.0, 1000.0, allow_nan=False, allow_infinity=False))
    names = [f"op{i}" for i in range(n)]
    weights = {name: draw(amount) for name in names}
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1])
    edges = draw(st.sets(pairs, max_size=3 * n))
    return weights, {(names[i], names[j]): draw(amount) for i, j in sorted(edges)}


def check_plan(graph: PlacementGraph, plan: PlacementPlan, processes: int) -> None:
    assert sorted(plan.assignment) == sorted(graph.tasks)  # every task exactly once
    assert all(isinstance(p, int) and 0 <= p < processes for p in plan.assignment.values())
    assert len(plan.load_per_process) == processes
    assert math.isclose(sum(plan.load_per_process), graph.total_weight, rel_tol=1e-9, abs_tol=1e-9)
    for p, load in enumerate(plan.load_per_process):
        assert math.isclose(load, sum(graph.weights[t] for t in plan.tasks_on(p)), rel_tol=1e-9, abs_tol=1e-9)
    crossing = sum(x for (s, d), x in graph.traffic.items() if plan.assignment[s] != plan.assignment[d])
    assert math.isclose(plan.cut_traffic, crossing, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(plan.total_traffic, sum(graph.traffic.values()), rel_tol=1e-9, abs_tol=1e-9)
    assert plan.imbalance >= 1.0 - 1e-9
    assert set(plan.empty_processes) == set(range(processes)) - set(plan.assignment.values())


@SETTINGS
@given(dag=dags(), processes=st.integers(1, 4))
def test_place_assigns_every_task_once_consistently(dag, processes):
    graph = PlacementGraph(*dag)
    check_plan(graph, place(graph, processes), processes)
    check_plan(graph, round_robin(graph, processes), processes)


@SETTINGS
@given(dag=dags(), processes=st.integers(1, 4), threshold=st.integers(1, 12),
       factor=st.sampled_from([0.05, 0.1, 0.3]))
def test_place_with_the_papers_fixed_threshold(dag, processes, threshold, factor):
    graph = PlacementGraph(*dag)
    check_plan(graph, place(graph, processes, task_num_threshold=threshold, factor=factor), processes)


@SETTINGS
@given(dag=dags(), processes=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_place_is_deterministic_whatever_the_dict_order(dag, processes, seed):
    weights, traffic = dag
    graph = PlacementGraph(weights, traffic)
    rng = random.Random(seed)
    w_items, t_items = list(weights.items()), list(traffic.items())
    rng.shuffle(w_items)
    rng.shuffle(t_items)
    shuffled = PlacementGraph(dict(w_items), dict(t_items))
    assert shuffled == graph
    first, again, other = place(graph, processes), place(graph, processes), place(shuffled, processes)
    assert first == again == other


@SETTINGS
@given(dag=dags(), threshold=st.integers(1, 41))
def test_consolidation_tree_covers_every_task_exactly_once(dag, threshold):
    graph = PlacementGraph(*dag)
    tree = consolidate(graph, threshold)
    for level in range(tree.depth + 1):
        members = [t for group in tree.tree(level).values() for t in group]
        assert sorted(members) == sorted(graph.tasks)
        parents = tree.graph_at(level)
        assert math.isclose(parents.total_weight, graph.total_weight, rel_tol=1e-9, abs_tol=1e-9)
    for lvl in tree.levels:  # Algorithm 1 makes parents of one or two tasks
        assert all(1 <= len(kids) <= 2 for kids in lvl.children.values())
    for k in range(1, tree.depth + 1):  # each level merges something, and runs only at or above the threshold
        assert len(tree.graph_at(k - 1)) >= threshold and len(tree.graph_at(k)) < len(tree.graph_at(k - 1))
    # it stops below the threshold, or when a further level would merge nothing
    assert len(tree.top) < threshold or len(consolidate_level(tree.top).graph) == len(tree.top)
