"""Split/merge invariants without a runtime (hypothesis): whatever the batch cuts, the routing, the
replica count, the reorder window and the order in which pieces reach the merge, the merge
releases exactly the sequential outputs, in order, and ends with nothing pending."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastream as es
from elastream.ordered.split_merge import OrderedMerge, OrderedReplica, OrderedSplit

pytestmark = pytest.mark.timeout(120)


def operators():
    """(name, factory) of stateless and partitioned operators with selectivity 0, 1 and >1."""
    return st.sampled_from([
        ("map", lambda: es.ops.Map(lambda e: (e[0], e[1] * 3))),
        ("filter", lambda: es.ops.Filter(lambda e: e[1] % 3 == 0)),
        ("flat_map", lambda: es.ops.FlatMap(lambda e: [e] * (e[1] % 3))),
        ("count", lambda: es.ops.KeyedProcess(lambda e: e[0], lambda n, e: (n + 1, [(e[0], n + 1)] * (e[1] % 2)),
                                              state=int, partitions=8)),
        ("reduce", lambda: es.ops.KeyedReduce(lambda e: e[0], lambda a, e: a + e[1], initial=int, partitions=8)),
    ])


@settings(max_examples=200, deadline=None)
@given(op=operators(), n=st.integers(0, 300), keys=st.integers(1, 9), replicas=st.integers(1, 4),
       cuts=st.lists(st.integers(1, 40), min_size=1, max_size=20), capacity=st.integers(1, 8),
       scheme=st.sampled_from(["nonblocking", "lock"]), shuffle_seed=st.integers(0, 2**32 - 1))
def test_merge_restores_sequential_order_for_any_arrival_order(op, n, keys, replicas, cuts, capacity, scheme,
                                                               shuffle_seed):
    name, factory = op
    data = [(i % keys, i) for i in range(n)]
    reference = factory()
    reference.open(None)
    expected = reference.on_batch(list(data), 0) or []

    keyed = name in ("count", "reduce")
    split = OrderedSplit(replicas, key=(lambda e: e[0]) if keyed else None, partitions=8)
    copies = [OrderedReplica(factory(), r) for r in range(replicas)]
    for c in copies:
        c.inner.open(None)
    # Cut the input into batches of random sizes; route each; every replica runs its pieces in FIFO order.
    per_replica: list[list[tuple]] = [[] for _ in range(replicas)]
    i, seq = 0, 0
    while i < n:
        size = cuts[seq % len(cuts)]
        route = split._route_by_key if keyed else split._route_stateless
        for r, piece in route(seq, data[i:i + size]):
            per_replica[r].append(copies[r].run_piece(piece))
        i, seq = i + size, seq + 1
    # Interleave the replicas' output streams at random (each stream stays FIFO, as on one port).
    rng = random.Random(shuffle_seed)
    streams = [list(s) for s in per_replica if s]
    arrivals = []
    while streams:
        s = rng.choice(streams)
        arrivals.append(s.pop(0))
        if not s:
            streams.remove(s)
    merge = OrderedMerge(scheme, capacity)
    merge.open(None)
    released: list = []
    while arrivals:
        take = rng.randint(1, 5)
        released += merge.on_batch(arrivals[:take], 0)
        arrivals = arrivals[take:]
    assert released == expected
    assert merge.on_inputs_closed() is None
    stats = merge.statistics()
    assert stats.partial_batches == 0 and stats.parked == 0 and stats.reorder.emitted == seq
