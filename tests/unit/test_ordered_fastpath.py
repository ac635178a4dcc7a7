"""The light-load fast paths of an ordered split and its replicas (issue 20: held replicas cost little).

A unit held ready runs as split → replica 0 (+ idle replicas) → merge; under a light load every
tuple is its own batch, so what each batch costs the split and the replica is what the held run
adds. These tests pin down that the fast paths do what the full paths would have done — same
routing, same waits, same output — and that a replica spends one activation per piece.

Flows run on the one-step harness with a manual clock (a rate-limited source emits each tuple on
its own timer), so activation counts are exact, not a matter of speed.
"""

from __future__ import annotations

import itertools

import pytest

import elastream as es
from elastream.ordered.link import MIN_WINDOW, SplitMergeLink
from elastream.ordered.rebalance import Move
from elastream.ordered.replicate import merge_name, replica_name, replicate_flow, split_name
from elastream.ordered.split import OrderedSplit
from elastream.ordered.wire import IMPORT_SEQ
from elastream.runtime.clock import ManualClock
from elastream.runtime.harness import SchedulerHarness

pytestmark = pytest.mark.timeout(60)

N = 60


def _count(state: int, e: tuple) -> tuple[int, list]:
    return state + 1, [(e[0], e[1], state + 1)]


def light_flow(keyed: bool, n: int = N) -> es.Flow:
    """A rate-limited source (one tuple per timer) → "x" (a keyed running count, or a map) → Collect "out"."""
    flow = es.Flow("light")
    stream = flow.source(es.ops.RateLimited([(i % 7, i) for i in range(n)], 1000.0), name="src")
    if keyed:
        stream = stream.key_by(lambda e: e[0], partitions=8).process(_count, state=int, name="x")
    else:
        stream = stream.map(lambda e: (e[0], e[1] * 2), name="x")
    stream.sink(es.ops.Collect(), name="out")
    return flow


def sequential(keyed: bool, n: int = N) -> list:
    counts: dict[int, int] = {}
    out = []
    for i in range(n):
        k = i % 7
        if keyed:
            counts[k] = counts.get(k, 0) + 1
            out.append((k, i, counts[k]))
        else:
            out.append((k, i * 2))
    return out


def run_held(keyed: bool) -> SchedulerHarness:
    """``light_flow`` with "x" as two local replicas, replica 0 alone taking work (as a held run starts)."""
    flow = replicate_flow(light_flow(keyed), {"x": 2}, local={"x": [0, 1]}, active={"x": [0]})
    h = SchedulerHarness(flow, clock=ManualClock(), quantum_s=10.0)
    try:
        h.run()
    finally:
        h.close()
    return h


@pytest.mark.parametrize("keyed", [False, True], ids=["stateless", "keyed"])
def test_a_light_load_costs_the_replica_one_activation_per_piece_and_keeps_the_sequential_output(keyed):
    h = run_held(keyed)
    assert h.outputs()["out"] == sequential(keyed)
    replica, idle = h.tasks[replica_name("x", 0)], h.tasks[replica_name("x", 1)]
    pieces = replica.tuples_in
    assert pieces == N                       # one tuple per batch: each its own piece
    assert replica.activations <= pieces + 2  # no second activation per piece that finds its input empty
    assert idle.tuples_in == 0                # the held replica got nothing
    split = h.tasks[split_name("x")].op
    assert split.queued() == 0 and split.moves_done == 0
    assert h.tasks[merge_name("x")].tuples_out == N


def _keyed_split() -> OrderedSplit:
    return OrderedSplit(2, key=lambda e: e, partitions=4, link=SplitMergeLink(2), active=[0])


def test_a_keyed_split_is_calm_only_with_nothing_queued_moving_asked_or_due():
    split = _keyed_split()
    split._next_check = float("inf")          # no rate sample due
    assert split._calm()
    split._enqueue(0, (IMPORT_SEQ, 1, {}), 0)  # a control message queued, even of no tuples
    assert not split._calm()
    split._queues[0].clear()
    split._moves[1] = Move(1, 0, 1)
    assert not split._calm()
    split._moves.clear()
    split.set_active([0, 1])
    assert not split._calm()
    split._requested = None
    split._next_check = 0.0                   # a sample of the replicas' rates is due
    assert not split._calm()


def test_a_keyed_piece_goes_at_once_only_with_nothing_queued_ahead_and_room_for_sure():
    split = _keyed_split()
    link = split.link
    assert split._sendable(0)
    link.sent[0] = MIN_WINDOW                 # the backlog may have reached the replica's window: ask _flush
    assert not split._sendable(0)
    link.done[0] = 1
    assert split._sendable(0)
    split._enqueue(0, (0, 1, None, [0]), 1)   # something queued ahead: it keeps its place
    assert not split._sendable(0)


@pytest.mark.parametrize("backlogs", list(itertools.product([0, 3, MIN_WINDOW - 1, MIN_WINDOW, 40, 5000],
                                                            repeat=2)))
@pytest.mark.parametrize("active", [[0], [1], [0, 1]])
def test_a_calm_stateless_split_is_one_the_full_path_would_not_hold_back(backlogs, active):
    link = SplitMergeLink(2, local=[0])
    link.finished(0, 1000, 0.001)
    link.finished(1, 1000, 0.5)                          # replica 1 is much slower: windows differ
    link.sent = [1000 + b for b in backlogs]
    split = OrderedSplit(2, link=link, active=active)
    calm = split._calm()
    assert calm == any(b < MIN_WINDOW for r, b in enumerate(backlogs) if r in active)
    if calm:
        assert not split._must_wait(link.fill(), 1.0)


def test_a_stateless_split_with_one_active_replica_routes_to_it_whatever_the_fills():
    link = SplitMergeLink(3)
    link.sent = [0, 10_000, 0]
    split = OrderedSplit(3, link=link, active=[1])
    assert [r for r, _ in split._route_stateless(0, [1, 2])] == [1]
    split.set_active([0, 2])
    link.sent = [50, 10_000, 0]
    assert [r for r, _ in split._route_stateless(1, [3])] == [2]  # then the shortest queue again
