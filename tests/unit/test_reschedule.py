"""``reSchedule`` (IBM Fig. 5, runtime.reschedule) on scripted operators: how long a consumer is held, its bound."""

from __future__ import annotations

from types import SimpleNamespace

from elastream.runtime.reschedule import RescheduleStats, push_through
from elastream.runtime.traps import PREEMPT, ReadWait, WaitMode, WriteWait


class FakeScheduler:
    """Claims always succeed; records what was given back."""

    shutdown_requested = False

    def __init__(self):
        self.released: list = []

    def now(self) -> float:
        return 0.0

    def try_claim(self, task) -> bool:
        return True

    def release_nowait(self, task, outcome, busy_s=0.0, cpu_s=0.0) -> None:
        self.released.append((task.name, outcome))


def _task(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, batch_size=512, tuples_in=0)


def _setup(consumer_script):
    """A producer facing one full buffer of 64 (limit 16) and a consumer following ``consumer_script``."""
    producer, consumer = _task("producer"), _task("consumer")
    buf = SimpleNamespace(owner=consumer, capacity=64)
    calls: list[str] = []
    script = iter(consumer_script)

    def dispatch(sched, task, contexts, deadline):
        calls.append(task.name)
        if task is producer:
            return PREEMPT                       # its retried push went through
        took, outcome = next(script, (0, PREEMPT))
        consumer.tuples_in += took
        return outcome

    worker = SimpleNamespace(reschedule=RescheduleStats(), retiring=False)
    return producer, WriteWait((buf,)), worker, dispatch, calls


def test_a_coroutine_consumer_that_only_pushed_is_resumed_while_held_until_it_takes_tuples():
    sched = FakeScheduler()
    producer, wait, worker, dispatch, calls = _setup([(0, PREEMPT)] * 5 + [(12, PREEMPT)])
    outcome = push_through(sched, worker, producer, wait, {}, 1.0, 0.25, dispatch)
    assert outcome is PREEMPT
    assert calls == ["consumer"] * 6 + ["producer"]
    assert sched.released == [("consumer", PREEMPT)]            # given back once, not after every push
    stats = worker.reschedule
    assert (stats.runs, stats.limit, stats.most_tuples, stats.nested) == (1, 16, 12, 0)


def test_a_consumer_that_never_takes_is_resumed_at_most_the_limit():
    sched = FakeScheduler()
    producer, wait, worker, dispatch, calls = _setup([])
    push_through(sched, worker, producer, wait, {}, 1.0, 0.25, dispatch)
    assert calls.count("consumer") == 16 and len(sched.released) == 1


def test_a_consumer_that_waits_is_given_back_at_once():
    sched = FakeScheduler()
    blocked = ReadWait((), WaitMode.DISJ)
    producer, wait, worker, dispatch, calls = _setup([(0, blocked)])
    push_through(sched, worker, producer, wait, {}, 1.0, 0.25, dispatch)
    assert calls == ["consumer", "producer"] and sched.released == [("consumer", blocked)]


def test_a_batch_consumer_runs_one_batch_within_the_bound():
    sched = FakeScheduler()
    producer, wait, worker, dispatch, calls = _setup([(16, PREEMPT), (16, PREEMPT)])
    push_through(sched, worker, producer, wait, {}, 1.0, 0.25, dispatch)
    assert calls == ["consumer", "producer"]
    assert worker.reschedule.most_tuples == 16 <= worker.reschedule.limit
