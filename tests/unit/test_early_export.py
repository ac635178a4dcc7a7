"""A keyed replica answers a key group's export ahead of its queue, handing back the group's unprocessed tuples.

``take_back_exports`` is checked on fixed queues; the replica itself on the one-step
harness, where what sits in its port when it looks is exact.
"""

from __future__ import annotations

import time
from array import array
from collections import deque

import pytest

import elastream as es
from elastream.ordered.early_export import take_back_exports
from elastream.ordered.rebalance import queue_exports
from elastream.ordered.replica import OrderedReplica
from elastream.ordered.wire import EXPORT_SEQ, IMPORT_SEQ, STATE_SEQ
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.clock import ManualClock
from elastream.runtime.harness import SchedulerHarness

pytestmark = pytest.mark.timeout(30)

GROUPS = 4  # small int keys fall in group key % 4


def key(x):
    return x[0]


def test_nothing_changes_without_an_export_request():
    assert take_back_exports([(0, 2, None, [(1, "a"), (2, "b")]), (1, 1, None, [(1, "c")])], key, GROUPS) is None


def test_the_moving_groups_tuples_ahead_of_the_request_come_back_with_their_batch_offsets():
    pending = [(0, 4, None, [(0, "a"), (1, "b"), (2, "c"), (1, "d")]),
               (1, 3, array("i", [0, 2]), [(1, "e"), (3, "f")]),
               (EXPORT_SEQ, 1),
               (2, 1, None, [(2, "g")])]
    kept_ahead, kept, exported = take_back_exports(pending, key, GROUPS)
    assert kept_ahead == []
    assert kept == [(0, 4, array("i", [0, 2]), [(0, "a"), (2, "c")]),
                    (1, 3, array("i", [2]), [(3, "f")]),
                    (2, 1, None, [(2, "g")])]  # after the request: untouched
    assert exported == {1: [(0, 4, array("i", [1, 3]), [(1, "b"), (1, "d")]),
                            (1, 3, array("i", [0]), [(1, "e")])]}


def test_an_import_of_its_own_group_keeps_an_export_in_its_place():
    piece = (0, 1, None, [(1, "a")])
    assert take_back_exports([(IMPORT_SEQ, 1, {}), piece, (EXPORT_SEQ, 1)], key, GROUPS) is None
    kept_ahead, kept, exported = take_back_exports(
        [(EXPORT_SEQ, 2), (IMPORT_SEQ, 1, {}), piece, (EXPORT_SEQ, 1)], key, GROUPS)
    assert exported == {2: []}
    assert kept == [(IMPORT_SEQ, 1, {}), piece, (EXPORT_SEQ, 1)]  # group 1 leaves in its turn


def test_an_import_of_another_group_does_not_hold_an_export_back():
    # The replica just given group 2 gives group 1 away: group 1's tuples ahead of the request come back at once.
    first, second = (0, 2, None, [(1, "a"), (2, "b")]), (1, 1, None, [(1, "c")])
    kept_ahead, kept, exported = take_back_exports(
        [first, (IMPORT_SEQ, 2, {}), second, (EXPORT_SEQ, 1), (2, 1, None, [(1, "d")])], key, GROUPS)
    assert exported == {1: [(0, 2, array("i", [0]), [(1, "a")]), (1, 1, array("i", [0]), [(1, "c")])]}
    assert kept == [(0, 2, array("i", [1]), [(2, "b")]), (IMPORT_SEQ, 2, {}), (2, 1, None, [(1, "d")])]
    assert kept_ahead == []


def test_the_slices_ahead_of_the_port_come_back_first():
    ahead = [(0, 4, array("i", [2, 3]), [(1, "x"), (0, "y")])]
    pending = [(1, 1, None, [(1, "z")]), (EXPORT_SEQ, 1)]
    kept_ahead, kept, exported = take_back_exports(pending, key, GROUPS, ahead)
    assert kept_ahead == [(0, 4, array("i", [3]), [(0, "y")])]
    assert kept == []
    assert exported == {1: [(0, 4, array("i", [2]), [(1, "x")]), (1, 1, array("i", [0]), [(1, "z")])]}


def test_a_port_rewrite_counts_what_it_took_out():
    buf = PortBuffer(owner=None, port=0, capacity=8, name="p")  # type: ignore[arg-type]
    buf.offer([1, 2, 3], 0.0, 0.0)
    buf.offer([4, 5], 0.0, 0.0)
    assert buf.take_one() == 1
    assert buf.rewrite(lambda pending: None) == 0
    assert buf.rewrite(lambda pending: [x for x in pending if x % 2]) == 2
    assert (buf.count, buf.take(10)[0]) == (2, [3, 5])


class Messages(es.Operator):
    """A source that pushes ``first`` at once, then ``later`` after a nap of ``nap_s`` (on the harness clock)."""

    def __init__(self, first: list, later: list, nap_s: float):
        super().__init__(inputs=0, outputs=1)
        self.first, self.later, self.nap_s = first, later, nap_s

    async def process(self, ctx) -> None:
        await ctx.outputs[0].push_many(self.first)
        await ctx.sleep(self.nap_s)
        await ctx.outputs[0].push_many(self.later)


def replica_outputs(first: list, later: list, clock: ManualClock, tuple_s: float, nap_s: float = 0.001) -> list:
    """What one keyed replica (a running count per key, each tuple ``tuple_s`` of real and harness time)
    sends to its merge, given its input."""
    def count(n, x):
        time.sleep(tuple_s)
        clock.advance(tuple_s)
        return n + 1

    flow = es.Flow("early")
    (flow.source(Messages(first, later, nap_s), name="src")
         .then(OrderedReplica(es.ops.KeyedReduce(key, count, initial=int, partitions=GROUPS), 0), name="r")
         .sink(es.ops.Collect(), name="out"))
    with SchedulerHarness(flow, clock=clock, quantum_s=10.0, batch_size=64, max_queue_size=64) as h:
        return h.run().outputs["out"]


def test_the_replica_answers_an_export_before_the_pieces_queued_ahead_of_it():
    pieces = [(0, 3, None, [(0, "a"), (1, "b"), (0, "c")]), (1, 2, None, [(1, "d"), (2, "e")])]
    got = replica_outputs(pieces + [(EXPORT_SEQ, 1)], [], ManualClock(), 0.0)
    assert got[0] == (STATE_SEQ, 0, 1, {}, [(0, 3, array("i", [1]), [(1, "b")]), (1, 2, array("i", [0]), [(1, "d")])])
    assert [(o[0], list(o[2]), o[3]) for o in got[1:]] == [(0, [0, 2], [(0, 1), (0, 2)]), (1, [1], [(2, 1)])]


def test_a_long_piece_is_worked_through_in_slices_and_an_export_answered_between_them():
    clock = ManualClock()
    measure = (0, 1, None, [(3, "m")])  # measures the cost: 1 ms a tuple, so slices of MIN_SLICE (16) tuples
    long = (1, 40, None, [(k % 2, i) for i, k in enumerate(range(40))])
    # The request arrives at 5 ms (harness time): after the measuring piece, during the long one's first slice.
    got = replica_outputs([measure, long], [(EXPORT_SEQ, 1)], clock, 0.001, nap_s=0.005)
    first_slice, state = got[1], got[2]
    assert (first_slice[0], list(first_slice[2])) == (1, list(range(16)))
    assert state[:3] == (STATE_SEQ, 0, 1) and state[3] == {1: 8}  # group 1's 8 tuples of the first slice
    returned = [i for piece in state[4] for i in piece[2]]
    assert returned == list(range(17, 40, 2))  # the rest of group 1, unprocessed, with their offsets
    rest = [i for o in got[3:] for i in o[2]]
    assert rest == list(range(16, 40, 2))  # group 0 carries on in the same replica


def test_a_split_queues_an_export_ahead_of_its_data_and_behind_only_its_own_groups_import():
    # A replica's queue in the split: data, an import of group 2 (just given to it), more data, an import of 3.
    queue = deque([((0, 1, None, [(0, "a")]), 1), ((IMPORT_SEQ, 2, {}), 0), ((1, 1, None, [(2, "b")]), 1),
                   ((IMPORT_SEQ, 3, {}), 0)])
    out = queue_exports(queue, moving=[1, 3], imported={3: 4})
    assert [msg for msg, _ in out] == [(EXPORT_SEQ, 1), (0, 1, None, [(0, "a")]), (IMPORT_SEQ, 2, {}),
                                       (1, 1, None, [(2, "b")]), (IMPORT_SEQ, 3, {}), (EXPORT_SEQ, 3)]
    assert [n for _, n in out] == [0, 1, 0, 1, 0, 0]
