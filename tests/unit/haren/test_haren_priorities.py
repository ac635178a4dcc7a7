"""Each built-in Haren policy's g orders operators as its definition says, on a fixed feature snapshot."""

from __future__ import annotations

import pytest
from haren_fakes import chain_of, table_of

from elastream.policies.haren.chain import chain_priority
from elastream.policies.haren.fcfs import fcfs_priority
from elastream.policies.haren.features import NO_TUPLE
from elastream.policies.haren.hr import hr_priority
from elastream.policies.haren.multiclass import multiclass_priority
from elastream.policies.haren.scheduling_task import rank


def ranked_names(views, table, g) -> list[str]:
    order, _ = rank(list(views), [g(v, table) for v in views])
    return [v.name for v in order]


def test_vectors_rank_lexicographically_highest_first_and_ties_keep_their_order():
    order, prios = rank(["a", "b", "c", "d"], [(1, 5), (2, 0), (1, 7), (1, 5)])
    assert order == ["b", "c", "a", "d"]
    assert prios == [(2, 0), (1, 7), (1, 5), (1, 5)]


def test_fcfs_runs_the_earliest_head_clock_time_first_and_empty_inputs_last():
    tasks = chain_of("src", "a", "b", "c")
    views, table = table_of(tasks, {"head_clock_time": [5.0, 3.0, 1.0, NO_TUPLE]})
    assert ranked_names(views, table, fcfs_priority) == ["b", "a", "src", "c"]
    assert fcfs_priority(views[2], table) == (-1.0,)


def test_hr_priority_is_the_global_output_rate_of_the_downstream_path():
    # src -> a (cost 1, sel 0.5) -> b (cost 2, sel 1) -> sink (cost 1)
    tasks = chain_of("src", "a", "b", "sink")
    views, table = table_of(tasks, {"cost": [1.0, 1.0, 2.0, 1.0], "selectivity": [1.0, 0.5, 1.0, 1.0]})
    # b: out 1, work 2 + 1 = 3; a: out 0.5, work 1 + 0.5 * 3 = 2.5; src: out 0.5, work 1 + 2.5
    assert hr_priority(views[2], table) == pytest.approx((1 / 3,))
    assert hr_priority(views[1], table) == pytest.approx((0.5 / 2.5,))
    assert hr_priority(views[0], table) == pytest.approx((0.5 / 3.5,))
    assert ranked_names(views, table, hr_priority) == ["sink", "b", "a", "src"]


def test_hr_prefers_the_cheaper_and_more_productive_of_two_queries():
    q1, q2 = chain_of("s1", "x1", "k1"), chain_of("s2", "x2", "k2")
    views, table = table_of(q1 + q2, {"cost": [1, 1, 1, 1, 4, 1], "selectivity": [1, 1, 1, 1, 0.5, 1]})
    names = ranked_names(views, table, hr_priority)
    assert names.index("x1") < names.index("x2")  # 1 egress per 2 s against 0.5 per 4.5 s


def test_chain_gives_each_operator_its_envelope_segment_slope_then_head_clock_time():
    # One query: src (cost 1, sel 1) -> f (cost 1, sel 0.1) -> g (cost 2, sel 0.5) -> sink (cost 1, sel 1).
    # From (0, 1): the points are (1, 1), (2, 0.1), (4, 0.05), (5, 0.05): steepest is f's, slope 0.45,
    # so src and f share it; from (2, 0.1) the next is g's, slope 0.025; the sink's slope is 0.
    tasks = chain_of("src", "f", "g", "sink")
    views, table = table_of(tasks, {"cost": [1, 1, 2, 1], "selectivity": [1, 0.1, 0.5, 1],
                                    "head_clock_time": [9.0, 2.0, 1.0, 0.5]})
    assert chain_priority(views[0], table) == pytest.approx((0.45, -9.0))
    assert chain_priority(views[1], table) == pytest.approx((0.45, -2.0))
    assert chain_priority(views[2], table) == pytest.approx((0.025, -1.0))
    assert chain_priority(views[3], table) == pytest.approx((0.0, -0.5))
    # Equal slopes: the second dimension (earliest head clock time) decides.
    assert ranked_names(views, table, chain_priority) == ["f", "src", "g", "sink"]


def test_multiclass_runs_high_before_low_fcfs_within_high_hr_within_low():
    high, low = chain_of("hs", "ha", "hk"), chain_of("ls", "la", "lk")
    tags = {"hs": ("alerts", "high")}  # ha and hk inherit the query from their source
    values = {"priority_class": [0.0] * 6, "cost": [1, 1, 1, 1, 1, 1], "selectivity": [1, 1, 1, 1, 1, 1],
              "head_clock_time": [5.0, 1.0, 3.0, 0.1, 0.2, 0.3]}
    views, table = table_of(high + low, values, tags)
    for view in views:
        table.columns["priority_class"][view.index] = float(view.class_rank)
    assert [v.priority_class for v in views] == ["high"] * 3 + ["low"] * 3
    names = ranked_names(views, table, multiclass_priority)
    assert names[:3] == ["ha", "hk", "hs"]          # FCFS among HIGH, though LOW's tuples are older
    assert names[3:] == ["lk", "la", "ls"]          # HR among LOW: nearer the sink, less work per egress
    assert multiclass_priority(views[1], table) == (1.0, -1.0)


def test_chain_and_hr_cover_a_fork_each_branch_once():
    # src -> a -> (b -> sink1, c -> sink2): HR adds the branches; every operator gets a Chain slope.
    tasks = chain_of("src", "a", "b", "sink1")
    c_tasks = chain_of("c", "sink2")
    c_tasks[0].is_source = False
    tasks[1].downstream.append(c_tasks[0])
    c_tasks[0].upstream.append(tasks[1])
    tasks += c_tasks
    views, table = table_of(tasks, {"cost": [1.0] * 6, "selectivity": [1.0, 1.0, 0.5, 1.0, 0.1, 1.0],
                                    "head_clock_time": [0.0] * 6})
    # a: out = 1 * (0.5 + 0.1), work = 1 + (1 + 0.5) + (1 + 0.1)
    assert hr_priority(views[1], table) == pytest.approx((0.6 / 3.6,))
    slopes = [chain_priority(v, table)[0] for v in views]
    assert all(s >= 0 for s in slopes) and slopes[4] > slopes[2]   # the more selective branch is steeper
