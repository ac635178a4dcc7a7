"""A keyed split's active replicas change while the flow runs: key groups move with their state (issue 20).

Replicas join (they get their share of the key groups at once) and leave (they hand all of theirs
over), under real worker threads; the output stays exactly the sequential one, every key's
running state stays whole, and the held replicas get nothing until they are added.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es
from elastream.ordered.active_moves import handover_moves, joining_moves
from elastream.ordered.rebalance import choose_moves
from elastream.ordered.split import OrderedSplit
from elastream.ordered.link import SplitMergeLink
from elastream.processes.replicate import replica_name, replicate_flow, split_name
from flow_deadline import run_with_deadline
from test_split_merge import SwitchReplicas

pytestmark = pytest.mark.timeout(60)

N = 20_000


def keyed_flow(n: int = N) -> es.Flow:
    """src → key_by(key).process(running count) named "x" → Collect "out"."""
    flow = es.Flow("keyed-active")
    (flow.source(es.ops.FromIterable([(i % 97, i) for i in range(n)]), name="src")
         .key_by(lambda e: e[0], partitions=16)
         .process(lambda count, e: (count + 1, [(e[0], e[1], count + 1)]), state=int, name="x")
         .sink(es.ops.Collect(), name="out"))
    return flow


def with_switch(flow: es.Flow, at: dict[int, list[int]], live: dict) -> es.Flow:
    """``flow`` with a :class:`SwitchReplicas` in front of x's split."""
    rebuilt = es.Flow("switching")
    for name, handle in flow.operators.items():
        rebuilt.add(handle.operator, name=name)
    switch = rebuilt.add(SwitchReplicas(live, at), name="switch")
    for c in flow.connections:
        if c.dst == split_name("x"):
            rebuilt.connect(rebuilt[c.src].out(c.src_port), switch.in_(0))
            rebuilt.connect(switch.out(0), rebuilt[c.dst].in_(0))
        else:
            rebuilt.connect(rebuilt[c.src].out(c.src_port), rebuilt[c.dst].in_(c.dst_port))
    return rebuilt


@pytest.mark.parametrize("threads", [1, 2])
def test_keyed_replicas_join_and_leave_while_running_keep_the_sequential_output(threads):
    expected = run_with_deadline(keyed_flow(), processes=1, threads=1).outputs["out"]
    flow = replicate_flow(keyed_flow(), {"x": 3}, chunk=64, local={"x": [0, 1, 2]}, active={"x": [0]})
    live = {"ready": threading.Event()}
    at = {4_000: [0, 1], 9_000: [0, 1, 2], 14_000: [2]}
    handle = es.Runner(threads=threads, processes=1, max_queue_size=64, batch_size=32,
                       elastic=False).start(with_switch(flow, at, live))
    live["split"] = split = handle.operator(split_name("x"))
    live["ready"].set()
    result = handle.wait(30.0)
    assert result.outputs["out"] == expected
    per_replica = [result.stats.operators[replica_name("x", r)].tuples_in for r in range(3)]
    assert all(n > 0 for n in per_replica), per_replica  # each replica took work once it joined
    assert split.active == [2] and set(split.table) == {2}  # the leavers handed every key group over
    assert split.moves_done >= 16
    assert 0 < split.longest_hold_s < 30  # each move's pause: its key group's tuples held until the state arrived
    assert result.stats.operators[split_name("x")].longest_hold_s == split.longest_hold_s


def test_held_replicas_take_no_work_until_added():
    flow = replicate_flow(keyed_flow(5_000), {"x": 2}, local={"x": [0, 1]}, active={"x": [0]})
    result = run_with_deadline(flow, processes=1, threads=2, elastic=False)
    assert result.stats.operators[replica_name("x", 1)].tuples_in == 0  # (a replica counts the pieces it got)
    assert result.stats.operators[replica_name("x", 0)].tuples_in > 0
    assert len(result.outputs["out"]) == 5_000


def test_a_keyed_split_without_a_link_refuses_to_change_its_replicas():
    split = OrderedSplit(2, key=lambda e: e, partitions=4)
    with pytest.raises(NotImplementedError, match="cannot move key groups"):
        split.set_active([0])
    linked = OrderedSplit(2, key=lambda e: e, partitions=4, link=SplitMergeLink(2), active=[1])
    assert linked.table == [1, 1, 1, 1]
    linked.set_active([0, 1])  # accepted: applied between batches


def test_choose_moves_balances_only_the_active_replicas():
    table, load = [0, 0, 0, 1], [10, 10, 10, 10]
    assert choose_moves([1.0, 3.0, None], table, load, active=[0, 1]) == [(1, 0, 1), (2, 0, 1)]
    assert choose_moves([1.0, 3.0, None], table, load) == []  # an unmeasured replica stops every move


def test_a_leaving_replica_hands_every_key_group_over_evening_out_the_load():
    table, load = [0, 0, 1, 1, 1], [5, 0, 4, 4, 1]
    moves = handover_moves(table, load, leaving=1, active=[0, 2])
    assert sorted(p for p, _, _ in moves) == [2, 3, 4]
    assert all(source == 1 and target in (0, 2) for _, source, target in moves)
    assert {target for _, _, target in moves} == {0, 2}


def test_a_joining_replica_gets_its_share_at_once():
    table, load = [0] * 8, [10] * 8
    moves = joining_moves([2.0, None], table, load, joining=[1], active=[0, 1])
    assert len(moves) == 4 and all(m[1:] == (0, 1) for m in moves)  # half the load, as fast as the other


def test_a_joining_replica_gets_key_groups_even_when_no_recent_load_is_known():
    moves = joining_moves([None, None], [0] * 8, [0] * 8, joining=[1], active=[0, 1])
    assert [p for p, _, _ in moves] == [1, 3, 5, 7] and all(m[1:] == (0, 1) for m in moves)
