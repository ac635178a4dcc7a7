"""The ring consumer's hybrid-polling predictor (elastream.ipc.arrivals), driven with made-up clocks."""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastream.ipc import SharedRing
from elastream.ipc.arrivals import ArrivalPredictor

pytestmark = pytest.mark.timeout(30)

GAP = 0.010


def steady(p: ArrivalPredictor, n: int, start: float = 0.0, gap: float = GAP, jitter: float = 0.0,
           seed: int = 1) -> float:
    """Feed ``n`` arrivals every ``gap`` s (± uniform ``jitter``); return the schedule's next time."""
    rng = random.Random(seed)
    for i in range(n):
        p.arrived(start + i * gap + rng.uniform(-jitter, jitter))
    return start + n * gap


def test_no_plan_without_history_or_when_disabled():
    p = ArrivalPredictor()
    assert p.plan(0.0) is None
    p.arrived(0.0)
    assert p.plan(0.001) is None                      # one arrival gives no gap yet
    off = ArrivalPredictor(duty=0.0)
    steady(off, 10)
    assert off.plan(0.095) is None


def test_steady_stream_plans_a_narrow_window_around_the_next_arrival():
    p = ArrivalPredictor(duty=0.1)
    nxt = steady(p, 30, jitter=30e-6)
    start, stop = p.plan(nxt - 0.005)
    assert start < nxt < stop
    assert stop - start + p.lateness <= 0.1 * GAP


def test_one_late_arrival_does_not_move_the_schedule():
    p = ArrivalPredictor(duty=0.1)
    nxt = steady(p, 30, jitter=20e-6)
    p.arrived(nxt + 0.0007)                           # a stalled producer: 700 µs late
    start, stop = p.plan(nxt + 0.002)
    assert start < nxt + GAP < stop                   # the following record, on time, is still inside


def test_a_new_rate_is_learned_after_a_few_arrivals():
    p = ArrivalPredictor(duty=0.1)
    t = steady(p, 20)
    for i in range(8):                                # twice as fast from now on
        p.arrived(t + i * GAP / 2)
    nxt = t + 8 * GAP / 2
    plan = p.plan(nxt - GAP / 4)
    assert plan is not None and plan[0] < nxt < plan[1]
    assert p.gap == pytest.approx(GAP / 2, rel=0.05)


def test_a_pause_reanchors_instead_of_predicting_the_past():
    p = ArrivalPredictor(duty=0.1)
    t = steady(p, 20)
    p.arrived(t + 5.0)                                # the stream stopped for 5 s
    plan = p.plan(t + 5.001)
    assert plan is None or plan[1] > t + 5.001


def test_irregular_arrivals_make_the_predictor_step_aside():
    p = ArrivalPredictor(duty=0.1)
    rng = random.Random(3)
    t = 0.0
    plans = 0
    for _ in range(300):
        t += rng.expovariate(1 / GAP)                 # Poisson arrivals: nothing to predict
        p.arrived(t)
        plans += p.plan(t + 0.0001) is not None
    assert plans < 60


def test_timed_sleeps_that_end_late_make_the_consumer_wake_earlier():
    p = ArrivalPredictor()
    for _ in range(40):
        p.woke(planned=1.0, now=1.0003)
    assert p.sleep_until(2.0) == pytest.approx(2.0 - 0.0003, abs=2e-5)


@settings(max_examples=200, deadline=None)
@given(gaps=st.lists(st.floats(min_value=1e-5, max_value=0.5), min_size=2, max_size=60),
       duty=st.floats(min_value=0.0, max_value=0.5), probe=st.floats(min_value=0.0, max_value=0.02))
def test_a_window_never_exceeds_its_duty_share_of_the_gap(gaps, duty, probe):
    p = ArrivalPredictor(duty=duty)
    t = 0.0
    for g in gaps:
        t += g
        p.arrived(t)
        plan = p.plan(t + probe)
        if plan is not None:
            start, stop = plan
            assert start < stop and stop > t + probe
            assert stop - start + p.lateness <= duty * p.gap + 1e-12     # polls start up to `lateness` early


def test_ring_consumer_polls_its_window_and_counts_it(ring_path):
    """A predictor primed for a record in ~20 ms: the consumer polls, the record lands in the window."""
    with SharedRing.create(1 << 16) as ring:
        me = ring.register_producer()
        assert ring.try_read() == []                  # claim the consumer role (and its wake pipe)
        now = time.monotonic()                        # the clock of the producers' publish stamps
        ring._arrivals = p = ArrivalPredictor(duty=1.0, min_lead=0.015)
        p.last, p.gap, p.next = now - 0.020, 0.040, now + 0.020
        writer = threading.Timer(0.020, lambda: ring.try_write_batch([b"on time"], producer=me))
        writer.start()
        try:
            assert ring.read(timeout=5) == [(0, b"on time")]
        finally:
            writer.join()
        stats = ring.statistics()
        assert stats.poll_windows == 1 and stats.poll_hits == 1 and stats.read_poll_s > 0
        assert p.polls == 1 and p.hits == 1



def test_the_same_arrival_twice_is_counted_once():
    p = ArrivalPredictor()
    nxt = steady(p, 10)
    p.arrived(nxt - GAP)                              # the last publish again (two waits saw it)
    p.arrived(nxt - GAP)
    assert p.gap == pytest.approx(GAP) and p.plan(nxt - 0.002) is not None


def test_a_stream_resuming_at_another_phase_is_followed_at_once():
    p = ArrivalPredictor(duty=0.1)
    t = steady(p, 20)
    resume = t + 0.0537                               # a 50 ms pause, then the same rate at a new phase
    for i in range(3):
        p.arrived(resume + i * GAP)
    nxt = resume + 3 * GAP
    plan = p.plan(nxt - 0.005)
    assert plan is not None and plan[0] < nxt < plan[1]


def test_one_very_late_first_sleep_does_not_stop_polling_for_good():
    """A fresh process's first timed sleep can end milliseconds late; polling must come back."""
    p = ArrivalPredictor(duty=0.1)
    t = 0.0
    for _ in range(5):
        t += GAP
        p.arrived(t)
    p.woke(planned=t, now=t + 0.0024)                 # 2.4 ms late: more than the whole 1 ms budget
    planned = 0
    for _ in range(60):
        t += GAP
        p.arrived(t)
        if p.plan(t + 0.0001) is not None:
            planned += 1
            p.woke(planned=t + GAP - 0.0002, now=t + GAP - 0.00015)   # later sleeps end 50 µs late
    assert planned > 40
    assert p.lateness < 200e-6
