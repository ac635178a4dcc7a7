"""Ordered split / replica / merge (C-Stream §4.2) in one process: order, routing, replica changes, errors."""

from __future__ import annotations

import threading
import time
from array import array

import pytest

import elastream as es
from flow_deadline import run_with_deadline
from elastream.ordered.split_merge import END_SEQ, OrderedMerge, OrderedReplica, OrderedSplit, is_one_to_one
from elastream.processes.replicate import (choose_replicas, expand_assignment, merge_name, parse_replica_name,
                                           replica_name, replicate_flow, replicated_placement, split_name)

pytestmark = pytest.mark.timeout(60)

N = 5_000


def pipeline(op_builder, n: int = N) -> es.Flow:
    """src → (the operator under test, named "x") → Collect "out"."""
    flow = es.Flow("sm")
    s = flow.source(es.ops.FromIterable([(i % 23, i) for i in range(n)]), name="src")
    op_builder(s).sink(es.ops.Collect(), name="out")
    return flow


def sequential(op_builder, n: int = N) -> list:
    return run_with_deadline(pipeline(op_builder, n), threads=1).outputs["out"]


def run_live(flow: es.Flow, **runner_kw):
    """Run ``flow``; return its result and the run's handle (whose ``operator(name)`` is the live instance)."""
    handle = es.Runner(**runner_kw).start(flow)
    return handle.wait(30.0), handle


STATELESS = {
    "selectivity 0": lambda s: s.filter(lambda e: False, name="x"),
    "selectivity 1": lambda s: s.map(lambda e: (e[0], e[1] * 3), name="x"),
    "selectivity 1/3": lambda s: s.filter(lambda e: e[1] % 3 == 0, name="x"),
    "selectivity >1": lambda s: s.flat_map(lambda e: [e] * (e[1] % 4), name="x"),
}
PARTITIONED = {
    "running count": lambda s: s.key_by(lambda e: e[0], partitions=8).process(
        lambda n, e: (n + 1, [(e[0], n + 1)]), state=int, name="x"),
    "reduce": lambda s: s.key_by(lambda e: e[0], partitions=8).reduce(lambda a, e: (a[0], a[1] + e[1]), name="x"),
    "filtering keyed": lambda s: s.key_by(lambda e: e[0], partitions=4).process(
        lambda n, e: (n + 1, [(e[0], n)] * (n % 3)), state=int, name="x"),
}


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", sorted({**STATELESS, **PARTITIONED}))
def test_replicated_in_one_process_equals_sequential(case, threads):
    build = {**STATELESS, **PARTITIONED}[case]
    expected = sequential(build)
    flow = replicate_flow(pipeline(build), {"x": 3 if case in STATELESS else 4}, chunk=64)
    result = run_with_deadline(flow, threads=threads, max_queue_size=8, batch_size=16)
    assert result.outputs["out"] == expected


def test_partitioned_state_stays_whole_per_key():
    """Each key meets one replica, so per-key running counts equal a sequential fold."""
    build = PARTITIONED["running count"]
    result = run_with_deadline(replicate_flow(pipeline(build), {"x": 4}, chunk=50), threads=2)
    counts: dict[int, int] = {}
    for key, n in result.outputs["out"]:
        counts[key] = counts.get(key, 0) + 1
        assert n == counts[key]
    assert counts == {k: sum(1 for i in range(N) if i % 23 == k) for k in range(23)}


class SwitchReplicas(es.FunctionOperator):
    """Pass-through that tells the run's split to change its active replicas when given tuples pass."""

    def __init__(self, live: dict, at: dict[int, list[int]]):
        super().__init__()
        self.live, self.at = live, at

    def on_batch(self, items, port):
        for _, i in items:
            if i in self.at:
                self.live["ready"].wait(10.0)  # the test hands over the run's split right after start
                self.live["split"].set_active(self.at[i])
        return items


def test_replicas_join_and_leave_while_running_keep_order():
    build = STATELESS["selectivity >1"]
    expected = sequential(build, 20_000)
    flow = replicate_flow(pipeline(build, 20_000), {"x": 3}, chunk=32)
    flow[split_name("x")].operator.set_active([0, 1])   # the run's split starts from the flow's request
    rebuilt = es.Flow("switching")
    for name, handle in flow.operators.items():
        rebuilt.add(handle.operator, name=name)
    live = {"ready": threading.Event()}
    switch = rebuilt.add(SwitchReplicas(live, {6_000: [0, 1, 2], 12_000: [1, 2]}), name="switch")
    for c in flow.connections:
        if c.dst == split_name("x"):
            rebuilt.connect(rebuilt[c.src].out(c.src_port), switch.in_(0))
            rebuilt.connect(switch.out(0), rebuilt[c.dst].in_(0))
        else:
            rebuilt.connect(rebuilt[c.src].out(c.src_port), rebuilt[c.dst].in_(c.dst_port))
    handle = es.Runner(threads=2, max_queue_size=16, batch_size=32).start(rebuilt)
    live["split"] = split = handle.operator(split_name("x"))
    live["ready"].set()
    result = handle.wait(30.0)
    assert result.outputs["out"] == expected
    per_replica = {r: result.stats.operators[replica_name("x", r)].tuples_in for r in range(3)}
    assert all(n > 0 for n in per_replica.values()), per_replica  # replica 2 joined and got work
    assert split.active == [1, 2]


def piece(seq, size, offsets, outputs, nested=False, replica=0):
    """A replica's answer as the merge receives it: ``size`` is the batch's tuple count (inputs counted as
    the offsets, or 1)."""
    return (seq, size, offsets, outputs, nested, replica, len(offsets) if offsets else 1, 0.0)


def open_merge(capacity: int = 4) -> OrderedMerge:
    merge = OrderedMerge("nonblocking", capacity)
    merge.open(None)
    return merge


def test_merge_releases_by_serial_and_assembles_pieces():
    merge = open_merge()
    assert merge.on_batch([piece(1, 3, [1], [["b1"]], True)], 0) == []
    assert merge.statistics().partial_batches == 1
    assert merge.on_batch([piece(0, 1, None, ["a0", "a1"]), piece(2, 1, None, [])], 0) == ["a0", "a1"]
    # Serial 1's second piece completes it: its inputs' outputs in input order, then serial 2 (no outputs).
    assert merge.on_batch([piece(1, 3, [0, 2], [["x"], ["y", "z"]], True)], 0) == ["x", "b1", "y", "z"]
    assert merge.statistics().partial_batches == 0
    assert merge.statistics().reorder.emitted == 3


def test_merge_one_to_one_pieces_interleave_by_offset():
    merge = open_merge()
    out = merge.on_batch([piece(0, 5, [0, 2, 3], ["a", "c", "d"]), piece(0, 5, [1, 4], ["b", "e"])], 0)
    assert out == ["a", "b", "c", "d", "e"]


def test_merge_completes_a_batch_when_its_offsets_add_up_to_its_size_however_many_pieces():
    merge = open_merge()
    # A moving partition's tuples left their piece, so batch 0 came in three pieces; batch 1 in one keyed piece.
    assert merge.on_batch([piece(0, 5, [0, 3], ["a", "d"]), piece(0, 5, [4], ["e"])], 0) == []
    assert merge.on_batch([piece(1, 2, [1, 0], ["g", "f"])], 0) == []
    assert merge.on_batch([piece(0, 5, [2, 1], ["c", "b"])], 0) == ["a", "b", "c", "d", "e", "f", "g"]
    assert merge.statistics().partial_batches == 0


def test_merge_empty_outputs_advance_and_parked_batches_are_released():
    merge = open_merge(capacity=2)
    # Serials 5..2 arrive before 0 and 1: beyond the window they are parked, then released in order.
    out = merge.on_batch([piece(s, 1, None, [s]) for s in (5, 4, 3, 2)], 0)
    assert out == [] and merge.statistics().parked >= 2
    out = merge.on_batch([piece(1, 1, None, []), piece(0, 1, None, [0])], 0)
    assert out == [0, 2, 3, 4, 5]
    assert merge.on_inputs_closed() is None


def test_merge_end_outputs_follow_everything_replica_by_replica():
    merge = open_merge()
    assert merge.on_batch([(END_SEQ, 1, ["end1"]), piece(0, 1, None, ["a"]), (END_SEQ, 0, ["end0"])], 0) == ["a"]
    assert merge.on_inputs_closed() == ["end0", "end1"]


def test_merge_reports_a_lost_piece_at_the_end():
    merge = open_merge()
    merge.on_batch([piece(1, 1, None, ["b"])], 0)
    with pytest.raises(RuntimeError, match="never completed"):
        merge.on_inputs_closed()


def test_replica_per_input_outputs_for_keyed_pieces():
    op = es.ops.FlatMap(lambda x: [x] * x)
    replica = OrderedReplica(op, 0)
    assert not replica.one_to_one
    assert replica.run_piece((3, 3, [0, 2], [2, 0]))[:7] == (3, 3, [0, 2], [[2, 2], []], True, 0, 2)
    assert replica.run_piece((4, 2, None, [1, 2]))[:7] == (4, 2, None, [1, 2, 2], False, 0, 2)
    assert is_one_to_one(es.ops.Map(abs)) and not is_one_to_one(es.ops.Filter(bool))


class _Yields:
    """What a replica's context offers it for giving way: counts the calls (the engine suspends there)."""

    def __init__(self) -> None:
        self.calls = 0

    async def give_way(self) -> None:
        self.calls += 1


def _result_of(coroutine):
    """Run a coroutine that never suspends to its result."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")


def test_a_stateless_replica_gives_way_every_slice_and_hands_the_merge_the_whole_piece():
    replica = OrderedReplica(es.ops.FlatMap(lambda x: [x] * (x % 3)), 0)
    piece = (5, 100, None, list(range(100)))
    first = _result_of(replica.run_piece_giving_way(_Yields(), piece))    # no cost measured yet: one go
    replica._work = [1_000, 1.0]              # 1 ms a tuple measured: 10 per 10 ms slice, at least MIN_SLICE (16)
    ctx = _Yields()
    sliced = _result_of(replica.run_piece_giving_way(ctx, piece))
    assert ctx.calls == 6                     # 7 slices of up to 16 tuples
    assert sliced[:7] == first[:7] == (5, 100, None, [x for x in range(100) for _ in range(x % 3)], False, 0, 100)
    keyed = (6, 4, [0, 3], [1, 2])            # a keyed piece (offsets) comes in slices already: run whole
    assert _result_of(replica.run_piece_giving_way(ctx, keyed))[:5] == (6, 4, [0, 3], [[1], [2, 2]], True)
    assert ctx.calls == 6


def test_split_routes_a_key_to_one_replica_and_round_robin_whole_batches():
    split = OrderedSplit(2, key=lambda e: e, partitions=4)
    routed = split._route_by_key(0, [0, 1, 2, 3, 4, 5])
    assert sorted(r for r, _ in routed) == [0, 1]
    for r, (_, size, offsets, items) in routed:
        assert size == 6 and all(split.table[k % 4] == r for k in items) and list(offsets) == items
    rr = OrderedSplit(3)
    assert [rr._route_stateless(s, ["t"])[0][0] for s in range(4)] == [0, 1, 2, 0]
    with pytest.raises(NotImplementedError):
        split.set_active([0])
    with pytest.raises(ValueError):
        rr.set_active([3])


@pytest.mark.parametrize("build, count, match", [
    (lambda s: s.process(lambda st, e: (st, [e]), state=int, name="x"), 2, "cannot be replicated"),
    (lambda s: s.key_by(lambda e: e[0]).reduce(lambda a, e: e, name="x"), 129, "at most 128"),
    (lambda s: s.key_by(lambda e: e[0], partitions=4).reduce(lambda a, e: e, name="x"), 5, "at most 4"),
    (lambda s: s.map(lambda e: e, name="x"), 0, ">= 1"),
])
def test_unreplicable_requests_fail_at_build_time_naming_the_operator(build, count, match):
    with pytest.raises(es.FlowValidationError, match=match) as info:
        replicate_flow(pipeline(build), {"x": count})
    assert info.value.operator == "x"
    with pytest.raises(es.FlowValidationError, match="'nope', which is not in flow 'sm'"):
        replicate_flow(pipeline(build), {"nope": 2})


def with_ends(s):
    """A running count per key whose on_end emits each key's total (keys 5 * (i % 23) % 23: first seen 0, 5, 10...)."""
    return s.key_by(lambda e: e[0] * 5 % 23, partitions=8).process(
        lambda n, e: (n + 1, [(e[0], n + 1)] if n % 50 == 0 else []), state=int, name="x",
        on_end=lambda k, n: [(k, "end", n)])


def test_replicas_of_an_operator_with_on_end_end_in_the_streams_first_seen_key_order():
    want = sequential(with_ends)
    assert [e[0] for e in want if e[1:2] == ("end",)] == [k * 5 % 23 for k in range(23)]
    for threads in (1, 2):
        got = run_with_deadline(replicate_flow(pipeline(with_ends), {"x": 3}), threads=threads).outputs["out"]
        assert got == want
    with pytest.raises(es.FlowValidationError, match="place 'x#split' and 'x#merge' in one process") as info:
        replicate_flow(pipeline(with_ends), {"x": 2}, linked=[])
    assert info.value.operator == "x"


def test_placement_names_replicas_and_expansion_places_the_split_by_its_neighbour_and_the_merge_with_it():
    flow = pipeline(STATELESS["selectivity 1"])
    plan = replicated_placement(flow, 2, {"x": 2}, placement={"src": 1, "x": 1, "out": 0})
    assert plan == {"src": 1, "x": 1, "out": 0, "x#0": 1, "x#1": 0}
    rewritten, full = expand_assignment(flow, plan, 2, {"x": 2})
    # The merge joins its split (they share a link that bounds the replicas' backlogs).
    assert full == {"src": 1, split_name("x"): 1, merge_name("x"): 1, "x#0": 1, "x#1": 0, "out": 0}
    assert set(rewritten.operators) == set(full)
    assert expand_assignment(flow, {"src": 1, "x": 1, "out": 0}, 2, {"x": 2})[1] == full  # the same, unpinned
    assert parse_replica_name("x#12") == ("x", 12) and parse_replica_name("x#split") is None
    unchanged, same = expand_assignment(flow, {"src": 0, "x": 1, "out": 0}, 2)
    assert unchanged is flow and same == {"src": 0, "x": 1, "out": 0}


@pytest.mark.parametrize("pinned", ["x#0", "x#split", "x#merge"])
def test_a_placement_pins_only_replicas_that_replicas_asks_for(pinned):
    flow = pipeline(STATELESS["selectivity 1"])
    with pytest.raises(es.FlowValidationError, match=r"pass replicas=\{'x': k\}") as info:
        expand_assignment(flow, {"src": 0, "x": 0, "out": 0, pinned: 1}, 2)
    assert info.value.operator == "x"
    with pytest.raises(es.FlowValidationError, match="asks for 2 replicas"):
        expand_assignment(flow, {"src": 0, "x": 0, "out": 0, "x#2": 1}, 2, {"x": 2})
    with pytest.raises(es.FlowValidationError, match="pass replicas="):
        es.Runner(processes=2, placement={"src": 0, "x": 0, "out": 0, pinned: 1}).run(flow)


@pytest.mark.parametrize("processes", [1, 2])
def test_replicas_naming_an_unknown_operator_fail_naming_it_and_the_flow(processes):
    with pytest.raises(es.FlowValidationError, match="'nope', which is not in flow 'sm'") as info:
        es.Runner(processes=processes, replicas={"nope": 2}).run(pipeline(STATELESS["selectivity 1"]))
    assert info.value.operator == "nope"


def test_each_replica_runs_its_own_instance_and_keys_spread_over_the_default_key_groups():
    build = lambda s: s.key_by(lambda e: e[0]).reduce(lambda a, e: (a[0], a[1] + e[1]), name="x")
    flow = replicate_flow(pipeline(build), {"x": 2})
    assert flow[split_name("x")].operator.partitions == 128          # the reduce's key groups
    inners = [flow[replica_name("x", r)].operator.inner for r in (0, 1)]
    assert inners[0] is not inners[1]
    result, handle = run_live(flow, threads=2)
    assert result.outputs["out"] == sequential(build)
    live = [handle.operator(replica_name("x", r)).inner for r in (0, 1)]
    assert all(live[r] is not inners[r] for r in (0, 1))              # the run's instances, not the flow's
    keys = [set(inner.acc) for inner in live]
    assert keys[0] and keys[1] and not keys[0] & keys[1]              # both replicas got keys, none shared
    assert keys[0] | keys[1] == set(range(23))


def test_automatic_rule_replicates_the_dominant_operator():
    flow = es.Flow("auto")
    (flow.source(range(10), name="src").then(es.ops.Busy(cost_us=500.0), name="heavy")
         .map(lambda x: x, name="light").sink(es.ops.Collect(), name="out"))
    assert choose_replicas(flow, 2) == {"heavy": 2}
    assert choose_replicas(flow, 1) == {}
    plan = replicated_placement(flow, 2)
    assert {plan["heavy#0"], plan["heavy#1"]} == {0, 1}


def test_automatic_rule_replicates_an_operator_with_on_end_beside_its_merge():
    def heavy_counts(s):
        return s.key_by(lambda e: e[0], partitions=8).process(
            lambda n, e: (n + 1, [sum(range(3000)) and (e[0], n + 1)]), state=int, name="x",
            on_end=lambda k, n: [(k, "end", n)])

    flow = pipeline(heavy_counts, 2000)
    first = run_with_deadline(flow, threads=1)
    counts = choose_replicas(flow, 2, stats=first.stats)
    assert counts == {"x": 2}
    rewritten, full = expand_assignment(flow, {"src": 0, "x": 1, "out": 1}, 2, counts)
    assert full[split_name("x")] == full[merge_name("x")] == 0  # with the upstream src; the merge beside it
    got = run_with_deadline(pipeline(heavy_counts, 2000), timeout=90, processes=2, threads=1, replicas=counts)
    assert got.outputs["out"] == first.outputs["out"]


def test_expansion_takes_counts_or_the_automatic_rule_outside_the_placement():
    flow = es.Flow("auto")
    (flow.source(range(10), name="src").then(es.ops.Busy(cost_us=500.0), name="heavy")
         .sink(es.ops.Collect(), name="out"))
    base = {"src": 0, "heavy": 1, "out": 0}
    _, full = expand_assignment(flow, base, 2, "auto")
    assert (full["heavy#0"], full["heavy#1"]) == (1, 0)
    _, full = expand_assignment(flow, base, 2, {"heavy": 3})
    assert [full[f"heavy#{r}"] for r in range(3)] == [1, 0, 1]


def _sleepy_count(delay: float):
    def step(n, e):
        time.sleep(delay)  # releases the GIL, so two worker threads run both replicas at once
        return n + 1, [(e[0], n + 1)]
    return step


def test_partitions_move_with_their_state_away_from_a_slow_replica():
    build = lambda s: s.key_by(lambda e: e[0], partitions=16).process(_sleepy_count(0.0), state=int, name="x")
    expected = sequential(build, 12_000)
    flow = replicate_flow(pipeline(build, 12_000), {"x": 2}, chunk=32)
    flow[replica_name("x", 0)].operator.inner.step = _sleepy_count(0.0005)   # replica 0 is 10x slower
    flow[replica_name("x", 1)].operator.inner.step = _sleepy_count(0.00005)
    result, handle = run_live(flow, threads=3)
    split = handle.operator(split_name("x"))
    assert result.outputs["out"] == expected          # running counts per key intact: the state moved along
    assert split.moves_done >= 2
    assert sum(1 for r in split.table if r == 1) > 8  # most partitions now live on the fast replica
    done = result.stats.operators
    assert done[replica_name("x", 1)].tuples_in > done[replica_name("x", 0)].tuples_in


def test_a_move_takes_its_partitions_queued_tuples_along_and_exports_ahead_of_the_queue():
    from elastream.ordered.link import SplitMergeLink
    from elastream.ordered.rebalance import Move
    from elastream.ordered.split_merge import EXPORT_SEQ, IMPORT_SEQ

    split = OrderedSplit(2, key=lambda e: e, partitions=4, link=SplitMergeLink(2))
    pieces = [piece for _, piece in split._route_by_key(0, list(range(8)))]  # 0, 2, 4, 6 on replica 0
    split._enqueue(0, pieces[0], 4)
    split._enqueue(0, (IMPORT_SEQ, 2, {}), 0)                                 # partition 2 came in, is queued
    split._enqueue(0, (1, 2, None, [4, 2]), 2)                                # a whole batch for replica 0
    moving = {2: Move(2, 0, 1)}
    split.table[2] = -1
    split._take_from_queue(0, moving)
    queue = [msg for msg, _ in split._queues[0]]
    assert [m[0] for m in queue] == [0, IMPORT_SEQ, EXPORT_SEQ, 1]   # the export behind the import, ahead of data
    assert list(queue[0][2]) == [0, 4] and queue[0][3] == [0, 4]       # offsets in the batch kept
    assert list(queue[3][2]) == [0] and queue[3][3] == [4]
    assert [(seq, size, list(offs), xs) for seq, size, offs, xs in moving[2].held] == [(0, 8, [2, 6], [2, 6]),
                                                                                       (1, 2, [1], [2])]
    assert split.queued() == 3


def test_a_keyed_split_keeps_feeding_the_others_while_one_replica_queue_is_full():
    from elastream.ordered.rebalance import HOLD, QUEUE_CAP

    split = OrderedSplit(2, key=lambda e: e, partitions=4)
    assert not split._must_wait([1.5, 0.2], 1.0)                    # replica 1 still needs input
    assert split._must_wait([1.0, 1.0], 1.0)                        # every queue is full
    assert split._must_wait([QUEUE_CAP / HOLD, 0.0], 1.0)           # one queue at its cap: wait anyway
    assert not split._must_wait([0.4, QUEUE_CAP / HOLD * 0.4], 0.5)  # both below RESUME: go on


def _ending_split(rates, backlog, queues):
    """A keyed split of 2 replicas over 4 partitions (key k → partition k % 4 → replica k % 2) whose input
    has ended, with measured ``rates``, ``backlog`` tuples sent per replica and ``queues`` of keys."""
    from elastream.ordered.link import SplitMergeLink

    split = OrderedSplit(2, key=lambda e: e, partitions=4, link=SplitMergeLink(2))
    split._meter.rates = list(rates)
    split.link.sent = list(backlog)
    for r, keys in enumerate(queues):
        if keys:
            split._enqueue(r, (0, len(keys), array("i", range(len(keys))), list(keys)), len(keys))
    return split


def test_at_the_end_queued_partitions_move_from_the_replica_that_would_finish_last():
    # Replica 0 would finish in (100 + 400) / 100 = 5 s, replica 1 in 1 s: partition 2 (300 tuples) moves.
    split = _ending_split([100.0, 100.0], [100, 100], [[0] * 100 + [2] * 300, []])
    split._balance_end()
    assert {p: (m.source, m.target) for p, m in split._moves.items()} == {2: (0, 1)}
    assert split.table[2] == -1 and split.queued() == 100
    assert [len(piece[3]) for piece in split._moves[2].held] == [300]


def test_at_the_end_nothing_moves_that_would_not_end_the_run_sooner():
    balanced = _ending_split([100.0, 100.0], [100, 100], [[0] * 100, [1] * 100])
    balanced._balance_end()
    # Replica 1 is idle, but partition 0 carries all that replica 0 was sent: it would take that along
    # (handed back unprocessed) and only move the end to replica 1.
    late = _ending_split([100.0, 100.0], [1000, 0], [[0] * 50, []])
    late._load = [10, 0, 0, 0]
    late._balance_end()
    unknown = _ending_split([None, 100.0], [100, 0], [[0] * 400, []])
    unknown._balance_end()
    assert not balanced._moves and not late._moves and not unknown._moves


def test_at_the_end_a_move_counts_the_unprocessed_tuples_it_takes_along():
    # Replica 0 was sent 1,000 tuples, half of partition 0 and half of partition 2 (their recent load), and
    # holds 50 more of partition 0: moving partition 0 takes 550 along and ends both at 5.5 s, not 10.5 s.
    split = _ending_split([100.0, 100.0], [1000, 0], [[0] * 50, []])
    split._load = [10, 0, 10, 0]
    split._balance_end()
    assert {p: (m.source, m.target) for p, m in split._moves.items()} == {0: (0, 1)}


def test_stateless_batches_go_to_the_replica_with_the_smallest_backlog():
    slow = lambda e: (time.sleep(0.002), e)[1]
    build = lambda s: s.map(lambda e: e, name="x")
    expected = sequential(build, 6_000)
    flow = replicate_flow(pipeline(build, 6_000), {"x": 2}, chunk=16)
    flow[replica_name("x", 0)].operator.inner.fn = slow
    flow[replica_name("x", 1)].operator.inner.fn = lambda e: (time.sleep(0.0001), e)[1]  # 20x faster
    result = run_with_deadline(flow, threads=3)
    assert result.outputs["out"] == expected
    pieces = {r: result.stats.operators[replica_name("x", r)].tuples_in for r in (0, 1)}
    assert pieces[1] > 3 * pieces[0], pieces


def test_choose_moves_follows_the_capacity_shares_without_overshooting():
    from elastream.ordered.rebalance import choose_moves

    assert choose_moves([1.0, 3.0], [0, 0, 0, 1], [10] * 4) == [(1, 0, 1), (2, 0, 1)]  # 30:10 → 10:30
    assert choose_moves([1.0, 1.0], [0, 0, 1, 1], [10] * 4) == []           # already at the shares
    assert choose_moves([1.0, 1.1], [0] * 32 + [1] * 32, [10] * 64) == []   # within SLACK: leave it
    assert choose_moves([None, 1.0], [0, 0, 0, 1], [10] * 4) == []          # a rate unknown: no guess
    assert choose_moves([1.0, 100.0], [0, 1, 1, 1], [10] * 4) == []         # the source keeps its last partition
    # 64 partitions of equal load, capacities 45:55: 32:32 → 29:35 (exact would be 28.8:35.2), never past it.
    moves = choose_moves([0.45, 0.55], [0] * 32 + [1] * 32, [10] * 64)
    assert len(moves) == 3 and all(m[1:] == (0, 1) for m in moves)
    table = [0] * 32 + [1] * 32
    for p, _, target in moves:
        table[p] = target
    assert choose_moves([0.45, 0.55], table, [10] * 64) == []              # and nothing swings back


def test_rate_meter_counts_only_intervals_with_work_in_hand():
    from elastream.ordered.rebalance import RATE_WEIGHT, RateMeter

    meter = RateMeter(2)
    meter.observe(0.0, [0, 0], [True, True], [0.0, 0.0])
    meter.observe(0.1, [100, 50], [True, False], [0.1, 0.01])  # replica 1 may have run dry meanwhile
    meter.observe(0.2, [200, 300], [True, True], [0.2, 0.06])
    # Replica 0: wall-clock rate. Replica 1 had work in hand for half the period only: its own speed.
    assert meter.update() == [pytest.approx(1000.0), pytest.approx(5000.0)]
    meter.observe(0.3, [400, 400], [True, True], [0.3, 0.1])
    meter.observe(0.4, [500, 500], [True, True], [0.4, 0.2])
    assert meter.update() == [pytest.approx(RATE_WEIGHT * 1500.0 + (1 - RATE_WEIGHT) * 1000.0),
                              pytest.approx(RATE_WEIGHT * 1000.0 + (1 - RATE_WEIGHT) * 5000.0)]


class _RecordingPort:
    """An output port stand-in whose push never blocks."""

    def __init__(self):
        self.items: list = []

    async def push(self, item):
        self.items.append(item)


def _finish(coro) -> None:
    """Run a coroutine that does not suspend (its pushes never block) to completion."""
    with pytest.raises(StopIteration):
        coro.send(None)


def test_keyed_split_holds_back_only_the_pieces_of_a_replica_whose_backlog_is_full():
    from elastream.ordered.link import START_WINDOW, SplitMergeLink
    from elastream.ordered.split_merge import EXPORT_SEQ

    link = SplitMergeLink(2)
    split = OrderedSplit(2, key=lambda e: e, partitions=2, link=link)
    outs = [_RecordingPort(), _RecordingPort()]
    link.sent[0] = START_WINDOW                         # replica 0 has a full backlog, replica 1 none
    for seq in range(3):
        for r, piece in split._route_by_key(seq, [0, 1, 2, 3]):
            split._enqueue(r, piece, len(piece[3]))
    split._enqueue(0, (EXPORT_SEQ, 0), 0)               # a control message queues behind the pieces
    _finish(split._flush(outs))
    assert [p[0] for p in outs[1].items] == [0, 1, 2]   # the free replica got every piece, in order
    assert outs[0].items == [] and split.queued() == 6
    link.done[0] = START_WINDOW                         # replica 0 caught up
    _finish(split._flush(outs))
    assert [p[0] for p in outs[0].items] == [0, 1, 2, EXPORT_SEQ] and split.queued() == 0
    assert link.sent == [START_WINDOW + 6, 6]


def test_keyed_replicas_with_a_slow_one_keep_order_and_state():
    """A replica slower than the other holds back only its own pieces; outputs stay in sequential order."""
    build = lambda s: s.key_by(lambda e: e[0], partitions=2).process(_sleepy_count(0.0), state=int, name="x")
    expected = sequential(build, 3_000)
    flow = replicate_flow(pipeline(build, 3_000), {"x": 2}, chunk=16)
    flow[replica_name("x", 0)].operator.inner.step = _sleepy_count(0.0003)
    flow[replica_name("x", 1)].operator.inner.step = _sleepy_count(0.00002)
    result, handle = run_live(flow, threads=3)
    assert result.outputs["out"] == expected
    assert handle.operator(split_name("x")).queued() == 0


def test_a_linked_split_buffers_two_whole_batches_and_the_merge_a_whole_release_whatever_the_queue_size():
    from elastream.ordered.split_merge import MAX_CHUNK, MERGE_OUTPUT_CAPACITY
    from elastream.runtime.compile import compile_flow

    flow = replicate_flow(pipeline(PARTITIONED["reduce"]), {"x": 2})
    compiled = compile_flow(flow, max_queue_size=64, batch_size=16)
    capacity = {t.name: t.inputs[0].capacity for t in compiled.tasks if t.inputs}
    assert capacity[split_name("x")] == 2 * MAX_CHUNK   # a batch sized by the measured cost is not cut short
    assert capacity[replica_name("x", 0)] == 64
    # The merge's consumer holds a whole release: a merge waiting for room downstream takes no input,
    # so it would report no replica progress to the split meanwhile (and the split would starve them).
    assert capacity["out"] == MERGE_OUTPUT_CAPACITY


def test_a_replica_in_the_splits_process_gets_a_shorter_backlog():
    from elastream.ordered.link import LOCAL_WINDOW_S, WINDOW_S, SplitMergeLink

    link = SplitMergeLink(2, local=[0])
    for r in (0, 1):
        link.finished(r, 1000, 0.01)                        # both replicas finish 100,000 tuples/s
    assert link.windows() == [int(LOCAL_WINDOW_S * 1e5), int(WINDOW_S * 1e5)]
    flow = es.Flow("placed")
    flow.source(range(10), name="src").key_by(lambda e: e, partitions=4).reduce(lambda a, e: a + e, name="x") \
        .sink(es.ops.Collect(), name="out")
    rewritten, _ = expand_assignment(flow, {"src": 0, "x": 0, "out": 0, "x#0": 0, "x#1": 1}, 2, {"x": 2})
    link = rewritten[split_name("x")].operator.link
    assert link is rewritten[merge_name("x")].operator.link   # split and merge share process 0, and replica 0
    for r in (0, 1):
        link.finished(r, 1000, 0.01)
    assert link.windows() == [int(LOCAL_WINDOW_S * 1e5), int(WINDOW_S * 1e5)]


def test_a_replicas_window_and_the_pieces_follow_what_its_recent_tuples_cost():
    from elastream.ordered.link import RECENT_S, WINDOW_S, SplitMergeLink

    link = SplitMergeLink(1)
    for _ in range(500):
        link.finished(0, 1_000, 0.01)          # 5 s at 10 µs a tuple
    assert link.windows()[0] == pytest.approx(WINDOW_S / 10e-6, rel=0.01)
    for _ in range(round(RECENT_S / 0.01)):
        link.finished(0, 125, 0.01)            # then RECENT_S at 80 µs: the mean since the start is 10.4 µs
    assert link.cost_per_tuple() == pytest.approx(80e-6, rel=0.01)
    assert link.windows()[0] == pytest.approx(WINDOW_S / 80e-6, rel=0.01)
    assert sum(link.busy_s) / sum(link.done) == pytest.approx(5.3 / 503_750)   # the totals stay whole


def test_the_work_a_replica_has_left_counts_the_time_it_worked_since_its_backlog_was_known():
    from elastream.ordered.link import SplitMergeLink

    link = SplitMergeLink(2, local=[0])
    for r in (0, 1):
        link.finished(r, 1000, 0.1)                         # both: 100 µs a tuple
    link.sent = [1000 + 500, 1000 + 500]                   # 50 ms left in each, as the backlogs read
    link.known_at = [10.0, 10.03]                          # replica 1's outputs came in 30 ms later
    assert link.backlog_seconds(10.04) == pytest.approx([0.01, 0.04])
    assert link.backlog_seconds(11.0) == [0.0, 0.0]        # never below nothing left


def test_a_stateless_split_sends_the_ended_inputs_last_pieces_to_the_replica_with_least_work_left():
    from elastream.ordered.link import SplitMergeLink

    link = SplitMergeLink(2, local=[0])
    split = OrderedSplit(2, link=link)
    for r in (0, 1):
        link.finished(r, 1000, 0.1)                        # both: 100 µs a tuple
    link.sent = [1000 + 300, 1000 + 600]                  # 30 ms (a quarter of its window) and 60 ms (0.3)
    now = time.perf_counter()
    link.known_at = [now, now - 0.05]                      # replica 1 has worked 50 ms since: 10 ms left
    split._ending = True
    assert split._route_stateless(0, [1, 2])[0][0] == 1   # by the windows' fill, replica 0 would get it


# -- the keyed routing loop: C extension and Python agree -------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from elastream.ordered import split_merge  # noqa: E402


def test_the_keyed_routing_runs_in_c_where_the_extension_is_built():
    assert split_merge._splitfast is not None, "elastream.ordered._splitfast is not built: the split runs in Python"


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(-2**70, 2**70), st.text(max_size=3), st.just(-1)), max_size=60),
       partitions=st.integers(1, 9), replicas=st.integers(1, 4), tracked=st.booleans(), data=st.data())
def test_the_c_and_python_keyed_routing_agree(keys, partitions, replicas, tracked, data):
    table = data.draw(st.lists(st.integers(-1, replicas - 1), min_size=partitions, max_size=partitions))
    items = [(k, i) for i, k in enumerate(keys)]
    known = data.draw(st.lists(st.sampled_from(keys), max_size=3)) if keys else []

    def state():
        seen = dict.fromkeys(known)
        return ([3] * partitions, seen, [[] for _ in range(partitions)]) if tracked else (None, None, None)

    c_state, py_state = state(), state()
    c = split_merge._splitfast.cut(items, lambda x: x[0], table, partitions, replicas, *c_state)
    py = split_merge.cut_by_key_python(items, lambda x: x[0], table, partitions, replicas, *py_state)
    assert c == py
    assert c_state[0] == py_state[0] and c_state[2] == py_state[2]
    assert (c_state[1] is None and py_state[1] is None) or list(c_state[1]) == list(py_state[1])


def test_the_c_routing_passes_on_a_key_functions_error_and_refuses_a_bad_table():
    def broken(x):
        raise KeyError("no key here")

    with pytest.raises(KeyError, match="no key here"):
        split_merge._splitfast.cut([(1, 2)], broken, [0], 1, 1, None, None, None)
    with pytest.raises(ValueError, match="out of range"):
        split_merge._splitfast.cut([(1, 2)], lambda x: x[0], [3], 1, 2, None, None, None)
    with pytest.raises(ValueError, match="one replica per partition"):
        split_merge._splitfast.cut([(1, 2)], lambda x: x[0], [0, 0], 3, 1, None, None, None)
    with pytest.raises(TypeError):
        split_merge._splitfast.cut([([1], 2)], lambda x: x[0], [0], 1, 1, None, None, None)  # unhashable key


@settings(max_examples=100, deadline=None)
@given(data=st.data(), size=st.integers(0, 40), as_list=st.booleans())
def test_the_c_and_python_reassembly_agree(data, size, as_list):
    from array import array

    order = data.draw(st.permutations(range(size)))
    taken = order[:data.draw(st.integers(0, size))]
    offsets = list(taken) if as_list else array("i", taken)
    outputs = [("out", j) for j in taken]
    c_slots, py_slots = [None] * size, [None] * size
    split_merge._splitfast.place(c_slots, offsets, outputs)
    split_merge.place_python(py_slots, offsets, outputs)
    assert c_slots == py_slots
    assert [c_slots[j] for j in taken] == outputs


def test_the_c_reassembly_refuses_offsets_that_do_not_fit():
    from array import array

    slots = [None] * 2
    with pytest.raises(IndexError, match="outside the batch"):
        split_merge._splitfast.place(slots, array("i", [2]), ["x"])
    with pytest.raises(IndexError, match="outside the batch"):
        split_merge._splitfast.place(slots, [-1], ["x"])
    with pytest.raises(ValueError, match="one offset per output"):
        split_merge._splitfast.place(slots, array("i", [0, 1]), ["x"])
    with pytest.raises(ValueError, match="array\\('i'\\)"):
        split_merge._splitfast.place(slots, array("q", [0]), ["x"])
    assert slots == [None, None]


def test_pieces_carry_their_offsets_as_int_arrays_across_processes():
    import pickle
    from array import array

    pieces, offsets, _ = split_merge.cut_by_key(list(range(1_000)), lambda x: x, [0, 1], 2, 2)
    assert all(type(o) is array and o.typecode == "i" for o in offsets)
    assert pickle.loads(pickle.dumps(offsets[1])) == array("i", range(1, 1_000, 2))


def test_a_links_window_setting_scales_the_windows_and_the_pieces():
    from elastream.ordered import link as link_module
    from elastream.ordered.link import SplitMergeLink

    default, small = SplitMergeLink(2, local=[0]), SplitMergeLink(2, local=[0], window_s=0.05)
    for link in (default, small):
        for r in (0, 1):
            link.finished(r, 1_000, 0.02)                     # 20 µs a tuple
    assert default.windows() == pytest.approx([link_module.LOCAL_WINDOW_S / 20e-6, link_module.WINDOW_S / 20e-6], abs=1)
    assert small.windows() == pytest.approx([link_module.LOCAL_WINDOW_S / 4 / 20e-6, 0.05 / 20e-6], abs=1)
    sizes = [OrderedSplit(2, key=lambda e: e, partitions=4, link=link)._batch_size(10_000)
             for link in (default, small)]
    assert sizes[1] == pytest.approx(sizes[0] / 4, abs=1)
    with pytest.raises(ValueError, match="positive"):
        SplitMergeLink(2, window_s=0)


def test_the_runner_refuses_a_replica_window_that_is_not_positive():
    with pytest.raises(ValueError, match="replica_window_ms"):
        es.OrderingConfig(replica_window_ms=0)
