"""Partitioned inputs (ordered-multicore §4): one contract suite over the hybrid queue (Fig. 7) and the
partitioned-queue baseline (§4.2), plus what distinguishes them.

Contract: exclusive claims (never two workers on one partition — checked by
an instrumented "in use" table that real worker threads update), per-key
FIFO order, every tuple exactly once, skewed keys finish, serials assigned at
enqueue, and composed with a reorder buffer the output equals a sequential
fold (Definition 5.1 in miniature).
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from elastream.ordered import (PARTITIONING_SCHEMES, REORDER_SCHEMES, Claim, HashPartitioner, HybridQueue,
                               PartitionedInput, PartitionedInputStats, PartitionedQueue, RangePartitioner,
                               make_partitioned_input, make_partitioner, make_reorder_buffer)

pytestmark = pytest.mark.timeout(60)

WORKERS = 4


@pytest.fixture(params=PARTITIONING_SCHEMES)
def scheme(request) -> str:
    return request.param


def _start(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, name="ordered-test-worker", daemon=True)
    t.start()
    return t


def _join_all(threads: list[threading.Thread], timeout: float = 30.0) -> None:
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "worker threads did not finish (deadlock or lost work)"


class InUse:
    """The instrumented check: records every time two workers held one partition at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: dict[int, int] = {}
        self.violations: list[tuple[int, int, int]] = []

    def enter(self, partition: int, worker: int) -> None:
        with self._lock:
            other = self._owner.setdefault(partition, worker)
            if other != worker:
                self.violations.append((partition, other, worker))

    def leave(self, partition: int, worker: int) -> None:
        with self._lock:
            if self._owner.get(partition) == worker:
                del self._owner[partition]


def _run_workers(inp: PartitionedInput, workers: int, handle: Callable[[int, tuple], None], *,
                 producing: threading.Event, budget: int = 4, seed: int = 0) -> InUse:
    """``workers`` threads take claims until the producer is done and the input is idle."""
    in_use = InUse()

    def worker(w: int) -> None:
        rng = random.Random(seed + w)
        while True:
            claim = inp.take(rng.randint(1, budget), worker=w)
            if claim is None:
                if not producing.is_set() and inp.is_idle():
                    return
                threading.Event().wait(0.0001)  # nothing for this worker right now
                continue
            in_use.enter(claim.partition, w)
            try:
                for entry in claim.items:
                    if rng.random() < 0.1:
                        threading.Event().wait(0.0001)  # a slow tuple: others must delegate, not wait
                    handle(w, entry)
            finally:
                in_use.leave(claim.partition, w)
                inp.done(claim.partition)

    threads = [_start(worker, w) for w in range(workers)]
    _join_all(threads)
    return in_use


# --- contract, single thread -------------------------------------------------------------------


def test_factory_builds_each_scheme_behind_the_protocol(scheme):
    inp = make_partitioned_input(scheme, 4)
    assert isinstance(inp, PartitionedInput)
    assert inp.scheme == scheme and inp.partitions == 4
    assert type(inp) is {"hybrid": HybridQueue, "partitioned": PartitionedQueue}[scheme]
    with pytest.raises(ValueError, match="hybrid, partitioned"):
        make_partitioned_input("shared", 4)


def test_serials_are_assigned_at_enqueue_and_items_come_back_per_partition_in_order(scheme):
    inp = make_partitioned_input(scheme, 2, workers=1)
    assert inp.put(0, "a0") == 0
    assert inp.put_many([(1, "b0"), (0, "a1"), (1, "b1")]) == range(1, 4)
    assert len(inp) == 4 and not inp.is_idle()
    seen: dict[int, list] = defaultdict(list)
    while (claim := inp.take(10, worker=0)) is not None:
        assert isinstance(claim, Claim)
        for serial, key, item in claim.items:
            seen[key].append((serial, item))
        inp.done(claim.partition)
    assert seen == {0: [(0, "a0"), (2, "a1")], 1: [(1, "b0"), (3, "b1")]}
    assert inp.is_idle() and len(inp) == 0


def test_a_claimed_partition_is_not_handed_out_again_until_done(scheme):
    inp = make_partitioned_input(scheme, 1, workers=1)
    inp.put_many([("k", i) for i in range(3)])
    first = inp.take(1, worker=0)
    assert [i for _, _, i in first.items] == [0]
    assert inp.take(5, worker=0) is None  # the only partition is in use
    inp.done(first.partition)
    rest = inp.take(5, worker=0)
    assert [i for _, _, i in rest.items] == [1, 2]
    inp.done(rest.partition)
    assert inp.is_idle()


def test_budget_bounds_each_claim(scheme):
    inp = make_partitioned_input(scheme, 1, workers=1)
    inp.put_many([("k", i) for i in range(10)])
    sizes = []
    while (claim := inp.take(3, worker=0)) is not None:
        sizes.append(len(claim.items))
        inp.done(claim.partition)
    assert sum(sizes) == 10 and max(sizes) <= 3


def test_misuse_is_a_clear_error(scheme):
    inp = make_partitioned_input(scheme, 2, workers=1)
    with pytest.raises(ValueError, match="not claimed"):
        inp.done(0)
    with pytest.raises(ValueError, match="budget"):
        inp.take(0)
    inp.put("a", 1, serial=10)
    with pytest.raises(ValueError, match="not increasing"):
        inp.put("a", 2, serial=5)
    assert inp.put("a", 3) == 11
    bad = make_partitioned_input(scheme, 2, partitioner=lambda key: 7)
    with pytest.raises(ValueError, match="range\\(2\\)"):
        bad.put("x", 1)
    claim = inp.take(5, worker=0) or inp.take(5, worker=1)
    inp.done(claim.partition)
    with pytest.raises(ValueError, match="not claimed"):
        inp.done(claim.partition)


def test_statistics_snapshot(scheme):
    inp = make_partitioned_input(scheme, 4, workers=1)
    inp.put_many([(3, "x")] * 6 + [(1, "y")] * 2)
    claim = inp.take(2, worker=0)
    stats = inp.statistics()
    assert isinstance(stats, PartitionedInputStats)
    assert (stats.scheme, stats.partitions, stats.puts, stats.taken, stats.claims) == (scheme, 4, 8, 2, 1)
    assert (stats.backlog, stats.max_backlog, stats.active) == (6, 8, 1)
    assert stats.max_partition_share == pytest.approx(6 / 8)
    inp.done(claim.partition)


def test_partitioning_strategies():
    assert HashPartitioner(4)(10) == 2
    r = make_partitioner("range", 4, key_range=(0, 100))
    assert isinstance(r, RangePartitioner) and [r(k) for k in (-1, 0, 24.9, 25, 99, 500)] == [0, 0, 0, 1, 3, 3]
    assert make_partitioner("range", 3, bounds=["g", "p"])("k") == 1
    with pytest.raises(ValueError, match="needs 2 bounds"):
        make_partitioner("range", 3, bounds=[1])
    with pytest.raises(ValueError, match="key_range"):
        make_partitioner("range", 3)
    with pytest.raises(ValueError, match="ascending"):
        RangePartitioner([3, 1])
    with pytest.raises(ValueError, match="hash, range"):
        make_partitioner("round-robin", 3)
    with pytest.raises(ValueError, match="has 3 partitions"):
        HybridQueue(HashPartitioner(3), 4)


def test_range_partitioned_input_routes_by_key_range(scheme):
    inp = make_partitioned_input(scheme, 4, strategy="range", key_range=(0, 40), workers=1)
    inp.put_many([(k, k) for k in (5, 15, 25, 35, 6)])
    routed: dict[int, list] = defaultdict(list)
    while (claim := inp.take(10, worker=0)) is not None:
        routed[claim.partition].extend(item for _, _, item in claim.items)
        inp.done(claim.partition)
    assert routed == {0: [5, 6], 1: [15], 2: [25], 3: [35]}


# --- contract, real threads --------------------------------------------------------------------


def _threaded_contract(scheme: str, keys: list, partitions: int) -> tuple[PartitionedInput, InUse, dict]:
    inp = make_partitioned_input(scheme, partitions, workers=WORKERS)
    processed: dict = defaultdict(list)
    producing = threading.Event()
    producing.set()

    def producer() -> None:
        for i, key in enumerate(keys):
            inp.put(key, (key, i))
            if i % 50 == 0:
                threading.Event().wait(0.0001)
        producing.clear()

    prod = _start(producer)
    # Each key's list is appended by one worker at a time if claims are exclusive.
    in_use = _run_workers(inp, WORKERS, lambda w, e: processed[e[1]].append(e), producing=producing)
    _join_all([prod])
    return inp, in_use, processed


def _check_per_key_order(keys: list, processed: dict) -> None:
    expected: dict = defaultdict(list)
    for i, key in enumerate(keys):
        expected[key].append(i)
    assert {k: [item[1] for _, _, item in v] for k, v in processed.items()} == expected
    for entries in processed.values():
        serials = [s for s, _, _ in entries]
        assert serials == sorted(serials)


def test_threads_never_share_a_partition_and_keep_per_key_order(scheme):
    rng = random.Random(1)
    keys = [rng.randrange(40) for _ in range(4000)]
    inp, in_use, processed = _threaded_contract(scheme, keys, partitions=8)
    assert in_use.violations == []
    _check_per_key_order(keys, processed)
    stats = inp.statistics()
    assert (stats.puts, stats.taken, stats.backlog, stats.active) == (4000, 4000, 0, 0)


def test_one_hot_key_still_finishes(scheme):
    rng = random.Random(2)
    keys = ["hot" if rng.random() < 0.9 else f"k{rng.randrange(20)}" for _ in range(4000)]
    inp, in_use, processed = _threaded_contract(scheme, keys, partitions=8)
    assert in_use.violations == []
    _check_per_key_order(keys, processed)
    assert inp.statistics().max_partition_share >= keys.count("hot") / len(keys) > 0.85


@pytest.mark.parametrize("reorder", REORDER_SCHEMES)
def test_with_a_reorder_buffer_the_output_equals_a_sequential_fold(scheme, reorder):
    """§5: partitioned input → workers (running count per key) → reorder buffer."""
    rng = random.Random(3)
    keys = [rng.randrange(25) for _ in range(3000)]
    inp = make_partitioned_input(scheme, 6, workers=WORKERS)
    out: list = []
    rb = make_reorder_buffer(reorder, 16, out.extend)
    counts: Counter = Counter()  # partitioned state: each key's count is touched by one worker at a time
    held: dict[int, list] = defaultdict(list)  # refused outputs, per worker, retried later
    producing = threading.Event()
    producing.set()

    def handle(w: int, entry: tuple) -> None:
        serial, key, _ = entry
        counts[key] += 1
        outputs = [(key, counts[key])] if counts[key] % 3 else []  # selectivity < 1: some inputs filtered
        held[w].append((serial, outputs))
        held[w][:] = [(t, o) for t, o in held[w] if not rb.try_add(t, o)]

    def retry_until_empty(w: int) -> None:
        while held[w]:
            held[w][:] = [(t, o) for t, o in held[w] if not rb.try_add(t, o)]
            threading.Event().wait(0.0001)

    inp.put_many((k, None) for k in keys)
    producing.clear()
    in_use = _run_workers(inp, WORKERS, handle, producing=producing)
    _join_all([_start(retry_until_empty, w) for w in range(WORKERS)])
    assert in_use.violations == []
    running: Counter = Counter()
    expected = []
    for key in keys:
        running[key] += 1
        if running[key] % 3:
            expected.append((key, running[key]))
    assert out == expected and rb.pending() == 0


# --- what distinguishes the schemes ------------------------------------------------------------


def test_hybrid_delegates_to_the_active_worker_instead_of_waiting():
    q = HybridQueue(HashPartitioner(2), 2)
    q.put_many([(0, "a0"), (0, "a1"), (1, "b0"), (0, "a2")])
    w1 = q.take(1)  # claims partition 0 with "a0"
    w2 = q.take(4)  # "a1" is handed over to w1's partition; w2 claims partition 1
    assert [i for _, _, i in w1.items] == ["a0"] and [i for _, _, i in w2.items] == ["b0"]
    assert q.take(4) is None  # "a2" delegated too: nothing for a third worker, and it did not wait
    stats = q.statistics()
    assert (stats.delegations, stats.backlog) == (2, 2)
    q.done(w1.partition)  # delegated work arrived meanwhile: partition 0 is re-queued
    again = q.take(4)
    assert again.partition == 0 and [i for _, _, i in again.items] == ["a1", "a2"]
    q.done(again.partition)
    q.done(w2.partition)
    assert q.is_idle() and q.statistics().requeues == 1


def test_hybrid_hands_work_out_in_arrival_order():
    """One worker sees serials in exactly increasing order: the master queue is FIFO over tuples (§4.3)."""
    rng = random.Random(4)
    q = HybridQueue(HashPartitioner(16), 16)
    q.put_many((rng.randrange(100), i) for i in range(2000))
    serials = []
    while (claim := q.take(rng.randint(1, 8))) is not None:
        serials.extend(s for s, _, _ in claim.items)
        q.done(claim.partition)
    assert serials == list(range(2000))


def test_hybrid_batches_a_run_of_one_hot_partition():
    q = HybridQueue(HashPartitioner(4), 4)
    q.put_many([(1, i) for i in range(10)] + [(2, "x")])
    claim = q.take(8)
    assert claim.partition == 1 and len(claim.items) == 8


def test_partitioned_baseline_serves_only_the_worker_s_own_partitions():
    q = PartitionedQueue(HashPartitioner(4), 4, workers=2)  # slot 0 owns {0, 2}, slot 1 owns {1, 3}
    q.put_many([(k, k) for k in (0, 1, 2, 3)])
    got = {0: [], 1: []}
    for w in (0, 1):
        while (claim := q.take(10, worker=w)) is not None:
            got[w].append(claim.partition)
            q.done(claim.partition)
    assert sorted(got[0]) == [0, 2] and sorted(got[1]) == [1, 3]
    q.put(0, "late")
    assert q.take(10, worker=1) is None  # slot 1 idles while slot 0 has work (no load balancing)


def test_partitioned_baseline_binds_threads_to_slots():
    q = PartitionedQueue(HashPartitioner(2), 2)
    slots = []
    both_alive = threading.Barrier(2)  # thread ids are reused once a thread ends: keep both alive

    def bind() -> None:
        both_alive.wait(10)
        slots.append(q.slot_of())
        both_alive.wait(10)

    threads = [_start(bind) for _ in range(2)]
    _join_all(threads)
    assert sorted(slots) == [0, 1]


@pytest.mark.parametrize("module", ["elastream.ordered.partitioning", "elastream.ordered.hybrid_queue",
                                    "elastream.ordered.partitioned_queue"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# --- the delegation counters, checked directly (no threads, no join timeouts) ---------------------


def _counters(q: HybridQueue) -> tuple[list[int], list[bool], list[int]]:
    """(delegated[p], active[p], ready queue) — Fig. 7's count[p] split in two, and the re-queued partitions."""
    return list(q._delegated), list(q._active), list(q._ready)


def _check_counter_invariants(q: HybridQueue) -> None:
    delegated, active, ready = _counters(q)
    owed = Counter(q._master)
    for p in range(q.partitions):
        owed[p] -= q._skip[p]
        # Invariant 3, exact: every tuple still queued in p is owed by a master entry or a delegation.
        assert len(q._queues[p]) == delegated[p] + owed[p], (p, len(q._queues[p]), delegated[p], owed[p])
        assert delegated[p] >= 0 and q._skip[p] >= 0
        # Invariant 4: delegated work is never stranded.
        if delegated[p]:
            assert active[p] or p in ready, (p, delegated, active, ready)
    assert len(ready) == len(set(ready)) and not any(active[p] for p in ready)


def test_hybrid_counters_step_by_step():
    q = HybridQueue(HashPartitioner(2), 2)
    q.put_many([(0, "a0"), (0, "a1"), (1, "b0"), (0, "a2"), (1, "b1")])
    w1 = q.take(1)
    assert _counters(q) == ([0, 0], [True, False], [])
    w2 = q.take(1)  # "a1" delegated to partition 0 on the way to "b0"
    assert [i for _, _, i in w2.items] == ["b0"]
    assert _counters(q) == ([1, 0], [True, True], [])
    assert q.take(5) is None  # "a2" and "b1" both delegated: to 0 and to 1
    assert _counters(q) == ([2, 1], [True, True], [])
    assert (q.statistics().delegations, q.statistics().requeues) == (3, 0)
    q.done(w2.partition)
    assert _counters(q) == ([2, 1], [True, False], [1])
    q.done(w1.partition)
    assert _counters(q) == ([2, 1], [False, False], [1, 0])
    ready1 = q.take(1)  # the ready queue first, at most budget of the delegated tuples
    assert ready1.partition == 1 and [i for _, _, i in ready1.items] == ["b1"]
    assert _counters(q) == ([2, 0], [False, True], [0])
    part = q.take(1)
    assert part.partition == 0 and [i for _, _, i in part.items] == ["a1"]
    assert _counters(q) == ([1, 0], [True, True], [])
    q.done(part.partition)  # one delegated tuple left: re-queued again
    assert _counters(q) == ([1, 0], [False, True], [0])
    last = q.take(8)
    assert [i for _, _, i in last.items] == ["a2"] and _counters(q) == ([0, 0], [True, True], [])
    q.done(last.partition)
    q.done(ready1.partition)
    assert _counters(q) == ([0, 0], [False, False], []) and q.is_idle()
    assert (q.statistics().delegations, q.statistics().requeues) == (3, 3)


@pytest.mark.parametrize("claim_ahead", [False, True], ids=["fig7", "claim-ahead"])
@pytest.mark.parametrize("seed", range(8))
def test_hybrid_counters_keep_their_invariants_under_seeded_interleavings(seed, claim_ahead):
    """Virtual workers take and release claims in a seeded random order; counters checked after every call."""
    rng = random.Random(seed)
    q = HybridQueue(HashPartitioner(4), 4, claim_ahead=claim_ahead)
    held: dict[int, Claim] = {}  # virtual worker -> its claim
    seen: dict[int, list] = defaultdict(list)
    n_put = 0
    for _ in range(3000):
        action = rng.random()
        if action < 0.4 and n_put < 1000:
            k = rng.choice([0, 0, 0, 1, 2, 3, 5, 6])  # one hot key: delegations are frequent
            q.put(k, (k, n_put))
            n_put += 1
        elif action < 0.75:
            free = [w for w in range(3) if w not in held]
            if free:
                claim = q.take(rng.randint(1, 4))
                if claim is not None:
                    held[rng.choice(free)] = claim
                    for serial, key, item in claim.items:
                        seen[key].append(item[1])
        elif held:
            w = rng.choice(sorted(held))
            q.done(held.pop(w).partition)
        _check_counter_invariants(q)
    while held or not q.is_idle():  # drain: release everything, then take until empty
        for w in sorted(held):
            q.done(held.pop(w).partition)
            _check_counter_invariants(q)
        while (claim := q.take(4)) is not None:
            for serial, key, item in claim.items:
                seen[key].append(item[1])
            q.done(claim.partition)
            _check_counter_invariants(q)
    assert _counters(q) == ([0] * 4, [False] * 4, []) and q._skip == [0] * 4 and not q._master
    assert sum(len(v) for v in seen.values()) == n_put
    for key, items in seen.items():
        assert items == sorted(items), key  # per-key FIFO, each tuple once
    stats = q.statistics()
    assert (stats.puts, stats.taken, stats.backlog, stats.active) == (n_put, n_put, 0, 0)
    assert stats.delegations > 0 and stats.requeues > 0
