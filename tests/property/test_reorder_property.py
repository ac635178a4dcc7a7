"""Hypothesis properties of the reorder buffers (ordered-multicore §3, Theorem 3.1), both schemes.

* Model: adding serials in any order with "keep refused outputs, retry
  later" accepts exactly the serials inside ``[next, next + capacity)`` and
  emits every output once, in serial order.
* Threads: concurrent producers, each owning a random subset of the serials
  and adding them in a random order with random delays, with a window far
  smaller than the number of serials — output strictly in serial order,
  nothing lost or duplicated, and no deadlock (refused producers retry).
  The interpreter's switch interval is shortened so threads interleave
  inside the buffer's code.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastream.ordered import REORDER_SCHEMES, make_reorder_buffer
from racing_threads import run_racing

pytestmark = pytest.mark.timeout(60)

schemes = st.sampled_from(REORDER_SCHEMES)


def _outputs_of(serial: int, multiplicity: int) -> list[tuple[int, int]]:
    return [(serial, j) for j in range(multiplicity)]


@settings(max_examples=150, deadline=None)
@given(scheme=schemes, capacity=st.integers(1, 12), first=st.integers(0, 50),
       data=st.data())
def test_model_any_add_order_with_retries(scheme, capacity, first, data):
    n = data.draw(st.integers(0, 60), label="n")
    multiplicity = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n), label="multiplicity")
    order = data.draw(st.permutations(range(n)), label="order")
    out: list = []
    rb = make_reorder_buffer(scheme, capacity, out.extend, first_serial=first)
    held: list[int] = []
    accepted_set: set[int] = set()
    model_next = 0  # single-threaded, so everything consecutive from 0 is released at once

    def offer(j: int) -> bool:
        nonlocal model_next
        accepted = rb.try_add(first + j, _outputs_of(first + j, multiplicity[j]))
        assert accepted == (j < model_next + capacity), "acceptance must follow the window exactly"
        if accepted:
            accepted_set.add(j)
            while model_next in accepted_set:
                model_next += 1
        return accepted

    for k in order:
        if not offer(k):
            held.append(k)
        while any([offer(j) for j in held if j < model_next + capacity]):  # retry refused outputs later
            held = [j for j in held if j not in accepted_set]
        assert rb.next_serial == first + model_next
        assert rb.pending() == len(accepted_set) - model_next
    assert not held
    expected = [o for j in range(n) for o in _outputs_of(first + j, multiplicity[j])]
    assert out == expected
    stats = rb.statistics()
    assert (stats.added, stats.emitted, stats.pending, stats.emitted_outputs) == (n, n, 0, len(expected))
    assert stats.max_occupancy <= capacity


def _producer(rb, serials: list[int], multiplicity: list[int], seed: int, errors: list) -> None:
    rng = random.Random(seed)
    todo = list(serials)
    rng.shuffle(todo)
    try:
        while todo:
            progressed = False
            for t in list(todo):
                if rng.random() < 0.2:
                    time.sleep(0 if rng.random() < 0.8 else 0.0002)  # random delays
                if rb.try_add(t, _outputs_of(t, multiplicity[t])):
                    todo.remove(t)
                    progressed = True
            if not progressed:
                time.sleep(0)  # every output refused: let the others move the window, then retry
    except BaseException as exc:  # noqa: BLE001 - reported by the test thread
        errors.append(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=schemes, producers=st.integers(1, 4), capacity=st.integers(1, 16),
       n=st.integers(0, 400), seed=st.integers(0, 2**32 - 1))
def test_threads_random_serials_in_order_nothing_lost_no_deadlock(scheme, producers, capacity, n, seed):
    rng = random.Random(seed)
    multiplicity = [rng.choice((0, 1, 1, 1, 2, 3)) for _ in range(n)]
    owner = [rng.randrange(producers) for _ in range(n)]  # each serial added exactly once, by one producer
    out: list = []
    rb = make_reorder_buffer(scheme, capacity, out.extend)
    errors: list = []
    threads = [threading.Thread(target=_producer, name="ordered-test-producer", daemon=True,
                                args=(rb, [t for t in range(n) if owner[t] == p], multiplicity, seed + p,
                                      errors))
               for p in range(producers)]
    run_racing(threads)
    assert not any(t.is_alive() for t in threads), f"producers deadlocked; buffer: {rb.statistics()}"
    assert not errors, errors
    assert out == [o for t in range(n) for o in _outputs_of(t, multiplicity[t])]
    stats = rb.statistics()
    assert (stats.added, stats.emitted, stats.pending, stats.next_serial) == (n, n, 0, n)
