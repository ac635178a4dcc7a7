"""IBM Streams' ``reSchedule`` (§4.1.4, Fig. 5): a producer that finds a queue full runs its consumer itself.

Under a policy with a ``reschedule_fraction`` (the ``ibm`` policy), a worker whose operator returns
:class:`~elastream.runtime.traps.WriteWait` does not block at once. For each full downstream port it
tries to take the consumer (:meth:`~elastream.runtime.scheduler.Scheduler.try_claim`, Fig. 5's
``consTryLock``), runs it for at most ``fraction`` of that port's capacity (IBM's ``RESCHED_LIMIT``, a
quarter of the queue), gives it back, and then retries its own push by running its operator again.
If no consumer can be taken (another worker runs it, or it is blocked itself), the producer blocks
as the mechanism always does: contention means someone else is already making progress.

Never nested: a consumer run here that finds its own downstream full is given back blocked; it is not
rescheduled in turn, so a pipeline is never walked recursively. Each call's work is bounded: the
consumer runs with its batch budget cut to the limit and a deadline already passed, so a function
operator returns after one batch. A coroutine operator returns after its next push or wait instead,
having perhaps taken nothing from the full queue (a split still dealing out what it took earlier):
it is resumed, still held, until it takes tuples, waits, or has been resumed ``limit`` times.
Giving it back after each push made a producer facing a full split pay two scheduler-lock round
trips per tuple the split dealt (IBM's 1,000-wide graph: one push per output).
:class:`RescheduleStats` on the worker counts the calls and the most tuples one call executed.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import thread_time
from typing import TYPE_CHECKING

from elastream.runtime.traps import PREEMPT, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task
    from elastream.runtime.traps import Outcome
    from elastream.runtime.workers import Worker


@dataclass(slots=True)
class RescheduleStats:
    """What one worker's reSchedule calls did: how many consumer runs, the most tuples one took, nesting seen."""

    runs: int = 0
    most_tuples: int = 0
    limit: int = 0
    nested: int = 0


def push_through(sched: Scheduler, worker: Worker, task: Task, wait: WriteWait, contexts: dict,
                 deadline: float, fraction: float, dispatch) -> Outcome:
    """Run the consumers of ``task``'s full ports, then ``task`` again, until it pushes or no consumer is free.

    Returns ``task``'s last outcome (still a WriteWait when it must block after all).
    """
    stats = worker.reschedule
    if stats.runs < 0:            # a reSchedule inside a reSchedule: counted, never done (see module doc)
        stats.nested += 1
        return wait
    outcome: Outcome = wait
    while type(outcome) is WriteWait and not sched.shutdown_requested and not worker.retiring:
        if not _run_consumers(sched, outcome.buffers, contexts, fraction, stats, dispatch):
            break
        if sched.now() >= deadline:
            break
        outcome = dispatch(sched, task, contexts, deadline)
    return outcome


def _run_consumers(sched: Scheduler, buffers: tuple[PortBuffer, ...], contexts: dict, fraction: float,
                   stats: RescheduleStats, dispatch) -> bool:
    """Run each full port's consumer that can be taken, bounded; True if any ran."""
    ran = False
    for buf in buffers:
        consumer = buf.owner
        if not sched.try_claim(consumer):
            continue
        limit = max(1, int(buf.capacity * fraction))
        ran = True
        before = consumer.tuples_in
        outcome, busy, cpu = _run_bounded(sched, consumer, contexts, limit, stats, dispatch)
        executed = consumer.tuples_in - before    # read before another worker may take the consumer
        sched.release_nowait(consumer, outcome, busy, cpu)
        stats.runs += 1
        stats.limit = limit
        stats.most_tuples = max(stats.most_tuples, executed)
    return ran


def _run_bounded(sched: Scheduler, consumer: Task, contexts: dict, limit: int, stats: RescheduleStats,
                 dispatch) -> tuple[Outcome, float, float]:
    """Run ``consumer`` (claimed by the caller) until it takes tuples: outcome, busy and CPU seconds.

    Each dispatch has a deadline already passed, so it returns after one batch of at most ``limit``
    tuples, or (a coroutine) after one push or wait; a run that took nothing and was only preempted is
    resumed, at most ``limit`` times in all, so a call executes one batch (a coroutine: one take).
    """
    saved_batch, saved_runs = consumer.batch_size, stats.runs
    consumer.batch_size = min(saved_batch, limit)
    stats.runs = -1               # marks "inside a reSchedule" for push_through
    taken = consumer.tuples_in
    t0, c0 = sched.now(), thread_time()
    try:
        for _ in range(limit):
            outcome = dispatch(sched, consumer, contexts, sched.now())
            if outcome is not PREEMPT or consumer.tuples_in != taken or sched.shutdown_requested:
                break
    finally:
        consumer.batch_size = saved_batch
        stats.runs = saved_runs
    return outcome, sched.now() - t0, thread_time() - c0
