"""IBM's producers wake a blocked consumer without the scheduler's lock (``lockless_wakeups``).

Under ``policy="ibm"`` a push to a READ_BLOCKED consumer only queues the consumer's buffer on the
scheduler's ``arrivals``; the next pick applies it (IBM Streams §4.1.4: a producer pushes onto the
free list without touching global data). Played with the one-step harness, one dispatch at a time.
"""

from __future__ import annotations

import threading

import elastream as es
from elastream.runtime.dedicated import bind
from elastream.runtime.harness import SchedulerHarness
from elastream.runtime.states import OperatorState


def _flow() -> es.Flow:
    flow = es.Flow("wake")
    flow.source(range(3), name="src").map(lambda x: x * 10, name="m").sink(es.ops.Collect(), name="out")
    return flow


def _harness(policy: str = "ibm") -> SchedulerHarness:
    return SchedulerHarness(_flow(), policy=policy, batch_size=1)   # one tuple a step: m blocks between pushes


def _blocked_consumer(h: SchedulerHarness):
    """Step until ``m`` waits for input; return the task."""
    m = next(t for t in h.sched.tasks if t.name == "m")
    while m.state is not OperatorState.READ_BLOCKED:
        h.step()
    return m


def test_a_push_to_a_blocked_consumer_is_queued_and_the_next_pick_applies_it():
    with _harness() as h:
        m = _blocked_consumer(h)
        while not h.sched.arrivals:
            assert h.step() is not None                         # until the source pushes to it
        assert m.state is OperatorState.READ_BLOCKED            # not woken yet: only queued
        assert list(h.sched.arrivals) == [m.inputs[0]]
        step = h.step()
        assert not h.sched.arrivals
        assert step.task == "m" or m.state is OperatorState.READY  # the pick applied the wake-up
        assert h.run().outputs["out"] == [0, 10, 20]


def test_the_producers_wake_up_does_not_wait_for_the_scheduler_lock():
    with _harness() as h:
        m = _blocked_consumer(h)
        woken = threading.Event()

        def producer() -> None:
            h.sched.port_written(m.inputs[0])
            woken.set()

        with h.sched.lock:                                     # another worker holds the lock meanwhile
            thread = threading.Thread(target=producer)
            thread.start()
            thread.join(5.0)
            assert woken.is_set()
        assert list(h.sched.arrivals) == [m.inputs[0]]


def test_stale_wake_ups_change_nothing():
    with _harness() as h:
        m = _blocked_consumer(h)
        for _ in range(3):
            h.sched.port_written(m.inputs[0])                   # its input is empty: nothing to wake for
        assert h.sched.try_claim(m) is False                   # a claim applies them first, under the lock
        assert not h.sched.arrivals and m.state is OperatorState.READ_BLOCKED
        assert h.run().outputs["out"] == [0, 10, 20]


def test_the_default_policy_and_a_dedicated_task_are_woken_at_once():
    with _harness("least_recently_run") as h:
        assert h.sched.arrivals is None
    with _harness() as h:
        m = _blocked_consumer(h)
        bind(h.sched, m)                                       # its own worker waits on its own condition
        m.inputs[0].force([1], 0.0, 0.0)
        h.sched.port_written(m.inputs[0])
        assert m.state is OperatorState.READY and not h.sched.arrivals
