"""IBM Streams' dynamic scheduler (ibm-streams-elastic-scheduler §4.1, Figs. 3–5) as a policy.

What the paper's lock-free structures do, and what stands in for them here:

* **Free list, least recently executed first** (Fig. 4): the scheduler's ready set is a dict in
  insertion order, and an operator goes in at the back each time it becomes READY again, so its
  front is the operator that has waited longest. ``pick`` takes the front: O(1), whatever the number
  of operators (no scan of the ready set, no per-pick sort).
* **Try-lock per input, one consumer at a time** (Fig. 2's ``consLocked``): an operator's RUNNING
  state, set under the scheduler's lock, is the consumer lock; this policy is ``exclusive``, so no
  operator is shared between workers (the engine builds no shared tasks under it). The unit is the
  operator rather than each of its inputs: Python operators are not required to be safe against two
  threads entering through two ports, which the paper's C++ operators are.
* **Drain before going back to the free list** (Fig. 3): an operator runs until its input is empty
  (``quantum``: up to :data:`DRAIN_S`); a source, whose input never ends, keeps the runner's quantum.
* **reSchedule** (Fig. 5): a producer whose downstream queue is full runs that consumer itself for up
  to a quarter of the queue, never nested (:mod:`elastream.runtime.reschedule`).
* **Pushing touches no global data** (§4.1.4): a producer whose consumer waits for input does not take
  the scheduler's lock to make it READY; it queues the wake-up (``lockless_wakeups``: the scheduler's
  ``arrivals``, a deque whose append is atomic under the GIL) and the next pick, already under the
  lock, applies every queued one. On IBM's 1,000-wide graph the split pushes to a waiting operator
  for almost every tuple: each push took the lock, contended by eight workers' releases, and the
  split's thread, the flow's serial stage, gave up the GIL whenever it had to wait for it.
* **Exponential back-off** (Fig. 4's ``block(delay)``): an idle worker is not woken by producers; it
  looks again after 0.1 ms, 1 ms, then every 10 ms (``backoff``).
* **Thread-local stop flags**: each worker's own ``retiring`` flag; threads come and go while the
  flow runs (the elastic thread controllers resize the pool).

Python has no compare-and-swap: the one scheduler lock (held for a few dictionary operations per
drained queue, so its cost is amortised as the paper amortises its global list) stands in for the
atomic flags and the lock-free list, and the GIL orders the rest.
"""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register

#: Longest run of one operator before it goes back to the free list (the paper drains the whole queue).
DRAIN_S = 1.0


@register("ibm")
class IbmStreamsPolicy(BasePolicy):
    """The front of the free list (least recently executed); drain, reSchedule, back off."""

    #: No operator shared between workers: one consumer per input at a time.
    exclusive = True
    #: A producer facing a full queue runs its consumer for up to this share of the queue (RESCHED_LIMIT).
    reschedule_fraction = 0.25
    #: (first, longest) idle wait: 0.1 ms growing ten-fold to IBM's 10 ms.
    backoff = (0.0001, 0.010)
    #: A producer wakes a blocked consumer without the scheduler's lock; the next pick applies it.
    lockless_wakeups = True

    def pick(self, ready, now):
        return next(iter(ready))

    def quantum(self, task, default: float) -> float:
        return default if task.is_source else DRAIN_S
