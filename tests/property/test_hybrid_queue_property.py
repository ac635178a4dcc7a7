"""Hypothesis properties of the partitioned inputs (ordered-multicore §4, Theorem 4.1), both schemes.

* Simulated workers (deterministic, one thread): hypothesis picks an
  interleaving of puts, takes with random budgets and dones by several
  logical workers. Invariants: a partition is never claimed twice at once,
  each key's tuples come out in put order, every tuple exactly once, and
  the input drains (no stranded work).
* Real threads: random keys (often skewed), partitions, budgets and worker
  counts; the same invariants with an instrumented "in use" table.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastream.ordered import PARTITIONING_SCHEMES, make_partitioned_input
from racing_threads import run_racing

pytestmark = pytest.mark.timeout(60)

schemes = st.sampled_from(PARTITIONING_SCHEMES)
keys_strategy = st.one_of(st.integers(0, 30), st.sampled_from(["hot", "hot", "hot", "cold"]))

# One step of the simulation: ("put", key) | ("take", worker, budget) | ("done", worker)
steps = st.one_of(
    st.tuples(st.just("put"), keys_strategy),
    st.tuples(st.just("take"), st.integers(0, 3), st.integers(1, 5)),
    st.tuples(st.just("done"), st.integers(0, 3)),
)


class Model:
    """Tracks claims and per-key order while the simulation runs."""

    def __init__(self) -> None:
        self.claims: dict[int, int] = {}  # worker -> partition it holds
        self.put_order: dict = defaultdict(list)
        self.seen: dict = defaultdict(list)
        self.puts = 0

    def on_take(self, worker: int, claim) -> None:
        assert claim.partition not in self.claims.values(), f"partition {claim.partition} claimed twice"
        assert 1 <= len(claim.items)
        self.claims[worker] = claim.partition
        for serial, key, item in claim.items:
            self.seen[key].append(item)


@settings(max_examples=200, deadline=None)
@given(scheme=schemes, partitions=st.integers(1, 6), workers=st.integers(1, 4),
       script=st.lists(steps, max_size=80))
def test_simulated_interleavings_keep_the_contract(scheme, partitions, workers, script):
    inp = make_partitioned_input(scheme, partitions, workers=workers)
    model = Model()
    for step in script:
        if step[0] == "put":
            key = step[1]
            assert inp.put(key, model.puts) == model.puts  # serial assigned at enqueue
            model.put_order[key].append(model.puts)
            model.puts += 1
        elif step[0] == "take":
            worker, budget = step[1] % workers, step[2]
            if worker in model.claims:
                continue  # a worker holds one claim at a time
            claim = inp.take(budget, worker=worker)
            if claim is not None:
                assert len(claim.items) <= budget
                model.on_take(worker, claim)
        else:
            worker = step[1] % workers
            if worker in model.claims:
                inp.done(model.claims.pop(worker))
    for worker, partition in list(model.claims.items()):
        inp.done(partition)
        del model.claims[worker]
    for _ in range(model.puts + 1):  # drain: every worker keeps taking until nothing is left
        progressed = False
        for worker in range(workers):
            claim = inp.take(3, worker=worker)
            if claim is not None:
                model.on_take(worker, claim)
                inp.done(model.claims.pop(worker))
                progressed = True
        if not progressed:
            break
    assert inp.is_idle(), f"stranded work: {inp.statistics()}"
    assert dict(model.seen) == {k: v for k, v in model.put_order.items()}
    stats = inp.statistics()
    assert (stats.puts, stats.taken, stats.backlog, stats.active) == (model.puts, model.puts, 0, 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=schemes, partitions=st.integers(1, 12), workers=st.integers(1, 4), n=st.integers(0, 600),
       hot=st.floats(0.0, 0.95), seed=st.integers(0, 2**32 - 1))
def test_threads_exclusive_partitions_per_key_order_everything_once(scheme, partitions, workers, n, hot, seed):
    rng = random.Random(seed)
    keys = ["hot" if rng.random() < hot else rng.randrange(50) for _ in range(n)]
    inp = make_partitioned_input(scheme, partitions, workers=workers)
    inp.put_many((k, i) for i, k in enumerate(keys))
    in_use_lock = threading.Lock()
    owner: dict[int, int] = {}
    violations: list = []
    seen: dict = defaultdict(list)
    errors: list = []

    def worker(w: int) -> None:
        wrng = random.Random(seed + w)
        try:
            while (claim := inp.take(wrng.randint(1, 6), worker=w)) is not None or not inp.is_idle():
                if claim is None:
                    threading.Event().wait(0.0001)
                    continue
                with in_use_lock:
                    if owner.setdefault(claim.partition, w) != w:
                        violations.append((claim.partition, owner[claim.partition], w))
                for _, key, item in claim.items:
                    seen[key].append(item)
                with in_use_lock:
                    owner.pop(claim.partition, None)
                inp.done(claim.partition)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,), name="ordered-test-worker", daemon=True)
               for w in range(workers)]
    run_racing(threads)
    assert not any(t.is_alive() for t in threads), f"workers did not finish: {inp.statistics()}"
    assert not errors and not violations, (errors, violations)
    expected: dict = defaultdict(list)
    for i, k in enumerate(keys):
        expected[k].append(i)
    assert dict(seen) == dict(expected)
