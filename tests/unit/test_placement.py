"""Placement (TurboStream §V): Algorithm 1 worked by hand, Algorithm 2 on known graphs, the
offline/online graph builders, edge cases, and the ``elastream placement`` command.

Pure functions only: no flow runs here.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

import elastream as es
from elastream.cli.main import main
from elastream.placement import (
    PlacementGraph, bisect, consolidate, consolidate_level, evaluate, name_key, place, round_robin, split_tasks,
)
from elastream.workloads.topologies import TOPOLOGIES, build_topology

pytestmark = pytest.mark.timeout(60)


def chain(n: int, weight: float = 1.0, traffic: float = 1.0) -> PlacementGraph:
    return PlacementGraph({f"t{i}": weight for i in range(n)},
                          {(f"t{i}", f"t{i + 1}"): traffic for i in range(n - 1)})


def clusters() -> PlacementGraph:
    """Two groups of five tasks, heavy traffic inside each group, one light stream between them.

    Task names interleave the groups, so name order alone would mix them.
    """
    a = [f"x{i}" for i in (0, 2, 4, 6, 8)]
    b = [f"x{i}" for i in (1, 3, 5, 7, 9)]
    traffic = {}
    for group in (a, b):
        for i, src in enumerate(group):
            for dst in group[i + 1:]:
                traffic[(src, dst)] = 100.0
    traffic[(a[-1], b[0])] = 1.0
    return PlacementGraph({t: 10.0 for t in a + b}, traffic)


# A Fig. 7-style example, worked by hand:
#
#     s --10--> a --6--> c --9--> d --3--> e
#     s --4---> b --8--> c
#
# Canonical order: s, a, b, c, d, e. Visit s: neighbours a(10), b(4) -> {s, a}.
# a: visited. b: neighbours c(8), s(4, visited) -> {b, c}. c: visited.
# d: neighbours c(9, visited), e(3) -> {d, e}. e: visited.
# Parent traffic: s->b 4 + a->c 6 = 10 from {s,a} to {b,c}; c->d 9 from {b,c} to {d,e};
# s->a 10, b->c 8 and d->e 3 are internal and dropped.
FIG7_TRAFFIC = {("s", "a"): 10, ("s", "b"): 4, ("a", "c"): 6, ("b", "c"): 8, ("c", "d"): 9, ("d", "e"): 3}


def fig7() -> PlacementGraph:
    return PlacementGraph(dict.fromkeys("sabcde", 1.0), FIG7_TRAFFIC)


# -- Algorithm 1 ---------------------------------------------------------------
def test_fig7_one_level_consolidation_by_hand():
    level = consolidate_level(fig7())
    assert dict(level.children) == {"L1.0": ("s", "a"), "L1.1": ("b", "c"), "L1.2": ("d", "e")}
    assert dict(level.graph.traffic) == {("L1.0", "L1.1"): 10.0, ("L1.1", "L1.2"): 9.0}
    assert dict(level.graph.weights) == {"L1.0": 2.0, "L1.1": 2.0, "L1.2": 2.0}


def test_fig7_levels_repeat_until_fewer_parents_than_threshold():
    tree = consolidate(fig7(), task_num_threshold=3)
    # Level 1 leaves 3 parents (not below 3), so level 2 runs: L1.0 pairs with L1.1 (10),
    # L1.2's only neighbour is taken, so it stands alone. 2 < 3: stop.
    assert tree.depth == 2
    assert dict(tree.levels[1].children) == {"L2.0": ("L1.0", "L1.1"), "L2.1": ("L1.2",)}
    assert dict(tree.top.traffic) == {("L2.0", "L2.1"): 9.0}
    assert tree.tree() == {"L2.0": ("s", "a", "b", "c"), "L2.1": ("d", "e")}
    assert consolidate(fig7(), task_num_threshold=4).depth == 1
    assert consolidate(fig7(), task_num_threshold=7).depth == 0


def test_consolidation_tie_goes_to_the_smaller_name_and_isolated_tasks_stop_it():
    g = PlacementGraph(dict.fromkeys(["hub", "n10", "n2", "lone"], 1.0),
                       {("hub", "n10"): 5, ("hub", "n2"): 5})
    assert consolidate_level(g).children["L1.0"] == ("hub", "n2")  # natural order: n2 < n10
    tree = consolidate(PlacementGraph(dict.fromkeys("abc", 1.0)), task_num_threshold=1)
    assert tree.depth == 0  # nothing to pair: no level is built, no endless loop


def test_consolidation_docstring_example():
    g = PlacementGraph({"a": 1, "b": 1, "c": 1}, {("a", "b"): 5, ("b", "c"): 1})
    c = consolidate(g, task_num_threshold=3)
    assert c.top.tasks == ("L1.0", "L1.1")
    assert c.members("L1.0") == ("a", "b")


# -- Algorithm 2 and place -----------------------------------------------------
def test_chain_of_12_on_two_processes_cuts_one_edge_and_balances():
    g = chain(12)
    plan = place(g, 2)
    assert plan.cut_traffic == 1.0
    assert sum(1 for (s, d) in g.traffic if plan.assignment[s] != plan.assignment[d]) == 1
    assert abs(plan.load_per_process[0] / g.total_weight - 0.5) < 0.1
    assert plan.balanced
    assert plan.cut_traffic <= round_robin(g, 2).cut_traffic == 11.0


def test_chain_of_12_with_the_papers_fixed_threshold():
    plan = place(chain(12), 2, task_num_threshold=7)
    assert (plan.level, plan.parent_tasks) == (1, 6)  # six pairs of two
    assert plan.cut_traffic == 1.0 and plan.load_per_process == (6.0, 6.0) and plan.balanced
    # Three parents of four tasks cannot be split in half: the plan says it is not balanced,
    # which is why place() searches every level when no threshold is given.
    coarse = place(chain(12), 2, task_num_threshold=4)
    assert (coarse.level, coarse.parent_tasks, coarse.balanced) == (2, 3, False)


def test_two_heavy_clusters_each_land_in_one_process():
    g = clusters()
    plan = place(g, 2)
    a = {plan.assignment[f"x{i}"] for i in (0, 2, 4, 6, 8)}
    b = {plan.assignment[f"x{i}"] for i in (1, 3, 5, 7, 9)}
    assert len(a) == len(b) == 1 and a != b
    assert plan.cut_traffic == 1.0
    assert plan.load_per_process == (50.0, 50.0)


@pytest.mark.parametrize("graph", [chain(12), clusters(), fig7()], ids=["chain", "clusters", "fig7"])
@pytest.mark.parametrize("processes", [2, 3, 4])
def test_cut_traffic_never_above_round_robin(graph, processes):
    assert place(graph, processes).cut_traffic <= round_robin(graph, processes).cut_traffic


@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_builtin_topologies_beat_round_robin_and_stay_balanced(kind):
    flow, _ = build_topology(kind, n_tuples=1, cost_us=100, selectivity=1, gil="hold")
    g = PlacementGraph.from_flow(flow)
    plan, baseline = place(g, 2), round_robin(g, 2)
    assert plan.cut_traffic < baseline.cut_traffic
    assert plan.balanced and plan.imbalance < 1.2


def test_algorithm2_split_gathers_the_first_half_of_a_chain():
    g = chain(4)
    split = split_tasks(g, g.tasks, 2)
    assert split.gathered == ("t0", "t1") and split.rest == ("t2", "t3")
    assert split.balance == 0.5 and split.target == 0.5 and split.cut_traffic == 1.0 and split.usable
    assert bisect(g, 2) == {"t0": 0, "t1": 0, "t2": 1, "t3": 1}


def test_three_processes_take_a_third_each():
    plan = place(chain(9), 3)
    assert plan.load_per_process == (3.0, 3.0, 3.0)
    assert plan.cut_traffic == 2.0


def test_a_heavy_task_takes_a_process_of_its_own():
    g = PlacementGraph({"big": 10.0, "a": 1.0, "b": 1.0, "c": 1.0},
                       {("a", "big"): 1, ("big", "b"): 1, ("b", "c"): 1})
    plan = place(g, 2)
    assert plan.tasks_on(plan.assignment["big"]) == ("big",)


# -- edge cases --------------------------------------------------------------------
def test_one_process_takes_everything():
    plan = place(clusters(), 1)
    assert set(plan.assignment.values()) == {0}
    assert plan.cut_traffic == 0.0 and plan.imbalance == 1.0


def test_more_processes_than_tasks_leaves_the_last_ones_empty_and_says_so():
    g = chain(3)
    plan = place(g, 5)
    assert sorted(plan.assignment.values()) == [0, 1, 2]
    assert plan.empty_processes == (3, 4)
    assert not plan.balanced
    assert "2 of 5 processes are empty" in plan.describe()


def test_disconnected_components_are_kept_whole():
    weights = {f"a{i}": 1.0 for i in range(4)} | {f"b{i}": 1.0 for i in range(4)}
    traffic = {(f"a{i}", f"a{i + 1}"): 5 for i in range(3)} | {(f"b{i}", f"b{i + 1}"): 5 for i in range(3)}
    plan = place(PlacementGraph(weights, traffic), 2)
    assert plan.cut_traffic == 0.0 and plan.load_per_process == (4.0, 4.0)
    assert len({plan.assignment[f"a{i}"] for i in range(4)}) == 1


def test_isolated_tasks_only_are_spread():
    plan = place(PlacementGraph(dict.fromkeys(["p", "q", "r", "s"], 1.0)), 2)
    assert plan.load_per_process == (2.0, 2.0) and plan.total_traffic == 0.0 and plan.cut_fraction == 0.0


def test_zero_weights_are_balanced_by_task_count():
    plan = place(chain(6, weight=0.0), 2)
    assert [len(plan.tasks_on(p)) for p in range(2)] == [3, 3]
    assert plan.imbalance == 1.0 and plan.cut_traffic == 1.0


def test_empty_graph():
    plan = place(PlacementGraph({}), 3)
    assert plan.assignment == {} and plan.load_per_process == (0.0, 0.0, 0.0) and plan.empty_processes == (0, 1, 2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_process_count_is_rejected(bad):
    with pytest.raises(ValueError, match="processes"):
        place(chain(3), bad)
    with pytest.raises(ValueError, match="processes"):
        round_robin(chain(3), bad)


def test_bad_graph_input_names_the_problem():
    with pytest.raises(ValueError, match="unknown task 'z'"):
        PlacementGraph({"a": 1}, {("a", "z"): 1})
    with pytest.raises(ValueError, match="self-loop on task 'a'"):
        PlacementGraph({"a": 1}, {("a", "a"): 1})
    with pytest.raises(ValueError, match="weight of task 'a'"):
        PlacementGraph({"a": -1})
    with pytest.raises(ValueError, match="traffic 'a' -> 'b'"):
        PlacementGraph({"a": 1, "b": 1}, {("a", "b"): float("nan")})
    with pytest.raises(ValueError, match="task_num_threshold"):
        consolidate(chain(3), 0)
    with pytest.raises(ValueError, match="factor"):
        place(chain(3), 2, factor=0)


def test_evaluate_rejects_a_partial_or_out_of_range_assignment():
    with pytest.raises(ValueError, match="unassigned \\['t2'\\]"):
        evaluate(chain(3), {"t0": 0, "t1": 0}, 2)
    with pytest.raises(ValueError, match="bad process index"):
        evaluate(chain(3), {"t0": 0, "t1": 0, "t2": 2}, 2)


def test_plan_is_frozen_and_json_ready():
    plan = place(chain(4), 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cut_traffic = 0.0  # type: ignore[misc]
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["assignment"] == {"t0": 0, "t1": 0, "t2": 1, "t3": 1}
    assert data["cut_traffic"] == 1.0 and data["total_traffic"] == 3.0 and data["empty_processes"] == []
    text = plan.describe()
    assert "process 0: load 2 (50.0%), 2 tasks: t0, t1" in text and "cut traffic 1 of 3" in text


# -- graph builders ----------------------------------------------------------------
def test_graph_canonical_order_and_neighbours_docstring_example():
    g = PlacementGraph({"c": 1.0, "b": 2.0, "a": 1.0}, {("a", "b"): 5, ("b", "c"): 1})
    assert g.tasks == ("a", "b", "c")
    assert g.neighbours("b") == (("a", 5.0), ("c", 1.0))
    assert sorted(["t10", "t2"], key=name_key) == ["t2", "t10"]
    cyclic = PlacementGraph(dict.fromkeys(["x", "y", "z"], 1.0), {("y", "z"): 1, ("z", "y"): 1, ("x", "y"): 1})
    assert cyclic.tasks == ("x", "y", "z")


def test_from_flow_chain_uses_declared_costs_and_unit_traffic():
    flow, _ = build_topology("chain", n_tuples=1, cost_us=100, selectivity=1, gil="hold", ops=3)
    g = PlacementGraph.from_flow(flow)
    assert g.tasks == ("src", "busy_0", "busy_1", "busy_2", "sink")
    assert dict(g.weights) == {"src": 1.0, "busy_0": 100.0, "busy_1": 100.0, "busy_2": 100.0, "sink": 1.0}
    assert set(g.traffic.values()) == {1.0} and len(g.traffic) == 4


def test_from_flow_propagates_selectivity_and_splits_over_output_ports():
    flow = es.Flow("sel")
    src = flow.add(es.ops.FromIterable(range(10)), name="src")
    half = flow.add(es.ops.Busy(10, selectivity=0.5), name="half")
    double = flow.add(es.ops.Busy(20, selectivity=2.0), name="double")
    out = flow.add(es.ops.Collect(), name="out")
    src >> half >> double >> out
    g = PlacementGraph.from_flow(flow, rates={"src": 8})
    assert dict(g.traffic) == {("src", "half"): 8.0, ("half", "double"): 4.0, ("double", "out"): 8.0}
    assert dict(g.weights) == {"src": 8.0, "half": 80.0, "double": 80.0, "out": 8.0}
    assert PlacementGraph.from_flow(flow, costs={"out": 0}).weights["out"] == 0.0

    tree, _ = build_topology("tree", n_tuples=1, cost_us=100, selectivity=1, gil="hold", depth=3)
    t = PlacementGraph.from_flow(tree)
    assert t.traffic[("split_0_0", "busy_1_0")] == 0.5 and t.weights["busy_2_3"] == 25.0
    assert t.traffic[("busy_2_3", "sink")] == 0.25 and t.weights["sink"] == 1.0


def test_from_flow_rejects_unknown_names():
    flow, _ = build_topology("chain", n_tuples=1, cost_us=1, selectivity=1, gil="hold", ops=2)
    with pytest.raises(ValueError, match="costs name operators not in flow 'chain': \\['nope'\\]"):
        PlacementGraph.from_flow(flow, costs={"nope": 1})


def test_from_measurements_online_mode():
    g = PlacementGraph.from_measurements({("src", "map"): 900, ("map", "sink"): 900, ("map", "map"): 5},
                                         {"src": 0.01, "map": 0.4})
    assert g.tasks == ("src", "map", "sink")
    assert g.weights["sink"] == 0.0 and ("map", "map") not in g.traffic
    assert place(g, 2).tasks_on(0) != ()


def test_from_stats_takes_one_periods_difference():
    def snap(cpu: float, sent: int) -> SimpleNamespace:
        return SimpleNamespace(operators={"a": SimpleNamespace(cpu_s=cpu, sent={"b": sent}),
                                          "b": SimpleNamespace(cpu_s=cpu / 2, sent={})})

    g = PlacementGraph.from_stats(snap(3.0, 500), previous=snap(1.0, 200))
    assert dict(g.weights) == {"a": 2.0, "b": 1.0} and dict(g.traffic) == {("a", "b"): 300.0}
    assert PlacementGraph.from_stats(snap(3.0, 500)).traffic[("a", "b")] == 500.0


# -- CLI -----------------------------------------------------------------------------
def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_chain_json(capsys):
    data = _json(capsys, "placement", "chain", "--processes", "2", "--json")
    assert data["flow"] == "chain" and data["graph"]["tasks"] == 14
    assert data["plan"]["cut_traffic"] == 1.0 and data["plan"]["total_traffic"] == 13.0
    assert data["round_robin"]["cut_traffic"] == 13.0
    assert data["plan"]["load_per_process"] == [601.0, 601.0]


def test_cli_table(capsys):
    assert main(["placement", "tree", "--processes", "2", "--depth", "3"]) == 0
    out = capsys.readouterr().out
    assert "operator → process" in out and "load per process" in out and "round-robin baseline" in out


def test_cli_loads_a_file_and_a_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "myflows.py").write_text(
        "import elastream as es\n"
        "def build():\n"
        "    flow = es.Flow('mine')\n"
        "    flow.source(range(3), name='src').map(lambda x: x).sink(es.ops.Collect(), name='out')\n"
        "    return flow\n")
    data = _json(capsys, "placement", f"{tmp_path / 'myflows.py'}:build", "-p", "2", "--json")
    assert data["flow"] == "mine" and set(data["plan"]["assignment"]) == {"src", "map_1", "out"}
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _json(capsys, "placement", "myflows:build", "--json")["graph"]["tasks"] == 3


@pytest.mark.parametrize("spec,message", [
    ("nonsense", "neither a built-in workload"),
    ("no_such_module_xyz:build", "no module 'no_such_module_xyz'"),
    ("elastream:nothing_here", "has no function 'nothing_here'"),
    ("/no/such/file.py:build", "no such file"),
])
def test_cli_bad_flow_is_a_clear_error(capsys, spec, message):
    assert main(["placement", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elastream placement: error:") and message in err
