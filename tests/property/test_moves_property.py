"""Partition moves without a runtime (hypothesis): whatever the batch cuts, the moves (mid-stream and at the
end), the pace of each replica and the order in which their outputs reach the merge, a keyed running
count keeps every key's state whole and the merge releases exactly the sequential outputs, in order.

The split, the replicas and the merge are the real operators; their async steps are driven by hand
(nothing in them waits: every push lands in a list), so hypothesis picks every interleaving.
"""

from __future__ import annotations

import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastream as es
from elastream.ordered.link import SplitMergeLink
from elastream.ordered.split_merge import OrderedMerge, OrderedReplica, OrderedSplit

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 8


class _Channel:
    """An output port that only appends (what a ring or a port would deliver later, in order)."""

    def __init__(self, sink: deque):
        self.sink = sink

    async def push(self, item) -> None:
        self.sink.append(item)


def _drive(coroutine) -> None:
    """Run a coroutine that never waits to its end."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise AssertionError("a split step waited: every push in this test lands at once")


def _count(n: int, e: tuple) -> tuple:
    return n + 1, [(e[0], e[1], n + 1)]


def _sequential(data: list) -> list:
    counts: dict = {}
    out = []
    for k, v in data:
        counts[k] = counts.get(k, 0) + 1
        out.append((k, v, counts[k]))
    return out


class _Run:
    """One split, ``replicas`` replicas of a running count per key, one merge; channels between them."""

    def __init__(self, replicas: int):
        # Tiny windows: once measured, a replica gets a few tuples at a time and the rest waits in the
        # split's queues, where moves must take it from.
        self.link = SplitMergeLink(replicas, window_s=1e-9)
        self.split = OrderedSplit(replicas, key=lambda e: e[0], partitions=PARTITIONS, link=self.link)
        self.replicas = [OrderedReplica(es.ops.KeyedProcess(lambda e: e[0], _count, state=int,
                                                            partitions=PARTITIONS), r) for r in range(replicas)]
        self.merge = OrderedMerge("nonblocking", capacity=4, link=self.link)
        self.merge.open(None)
        for replica in self.replicas:
            replica.open(None)
        self.to_replica = [deque() for _ in range(replicas)]
        self.to_merge = [deque() for _ in range(replicas)]  # one FIFO per replica: any interleaving at the merge
        self.outs = [_Channel(q) for q in self.to_replica]
        self.released: list = []
        self.seq = 0

    def cut(self, items: list) -> None:
        for r, piece in self.split._route_by_key(self.seq, items):
            self.split._enqueue(r, piece, len(piece[3]))
        self.seq += 1
        _drive(self.split._flush(self.outs))

    def move(self, rnd: random.Random) -> None:
        """Start moves out of one replica, as the split does: only when none is on its way."""
        split = self.split
        owned = [p for p, r in enumerate(split.table) if r >= 0]
        if split._moves or not owned:
            return
        source = split.table[rnd.choice(owned)]
        target = rnd.choice([r for r in range(len(self.replicas)) if r != source])
        mine = [p for p in owned if split.table[p] == source]
        split._start_moves([(p, source, target) for p in rnd.sample(mine, rnd.randint(1, len(mine)))])
        _drive(split._flush(self.outs))

    def step(self, r: int) -> bool:
        """Replica ``r`` handles its next message, as OrderedReplica.process does."""
        if not self.to_replica[r]:
            return False
        msg = self.to_replica[r].popleft()
        replica = self.replicas[r]
        if msg[0] >= 0:
            self.to_merge[r].append(replica.run_piece(msg))
        elif msg[0] == -3:  # EXPORT_SEQ
            self.to_merge[r].append(replica.export_partition(msg[1]))
        else:
            replica.import_partition(msg[2])
        return True

    def merge_one(self, r: int) -> bool:
        if not self.to_merge[r]:
            return False
        self.released += self.merge.on_batch([self.to_merge[r].popleft()], 0)
        _drive(self.split._deliver_states(self.outs))
        _drive(self.split._flush(self.outs))
        return True

    def busy(self) -> bool:
        return bool(self.split._moves or self.split.queued() or any(self.to_replica) or any(self.to_merge))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 400), keys=st.integers(1, 12), replicas=st.integers(2, 3), seed=st.integers(0, 2**32 - 1))
def test_moves_keep_state_and_order_under_any_interleaving(n, keys, replicas, seed):
    rnd = random.Random(seed)
    data = [(rnd.randrange(keys), i) for i in range(n)]
    run = _Run(replicas)
    pending = list(data)
    while pending:
        action = rnd.random()
        if action < 0.35:
            size = rnd.randint(1, 40)
            run.cut(pending[:size])
            del pending[:size]
        elif action < 0.45:
            run.move(rnd)
        elif action < 0.75:
            run.step(rnd.randrange(replicas))
        else:
            run.merge_one(rnd.randrange(replicas))
    # The input has ended: the split evens out the end (random measured rates), then everything drains.
    run.split._meter.rates = [rnd.uniform(1.0, 100.0) for _ in range(replicas)]
    while run.busy():
        if not run.split._moves and rnd.random() < 0.2:
            run.split._next_check = 0.0
            run.split._balance_end()
        _drive(run.split._deliver_states(run.outs))
        _drive(run.split._flush(run.outs))
        r = rnd.randrange(replicas)
        if not (run.step(r) if rnd.random() < 0.5 else run.merge_one(r)):
            run.step(rnd.randrange(replicas)) or run.merge_one(rnd.randrange(replicas))
    assert run.merge.on_inputs_closed() is None
    assert run.released == _sequential(data)
    assert sorted(k for replica in run.replicas for k in replica.inner.states) == sorted({k for k, _ in data})
