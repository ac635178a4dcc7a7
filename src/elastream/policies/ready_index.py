"""Indexes over the ready set, so that a pick costs O(log n) amortised, not a scan of every READY task.

A policy derived from :class:`IndexedPolicy` gives the scheduler an index (``ready_index()``); the
scheduler's :class:`~elastream.runtime.ready.ReadySet` reports every arrival to it with an arrival
stamp, and ``pick`` reads the index's heads:

* ``best()`` — the READY task with the smallest ``policy.index_key(task)`` (ties: the earliest
  arrival), computed when the task arrives;
* ``oldest()`` — the READY task run least recently (the aging check, :meth:`IndexedPolicy.starving`),
  kept only by policies that age (``ages = True``).

An entry is stale once its task left the ready set or arrived again (its stamp no longer matches);
a head that is stale is dropped when met, and the heap is rebuilt whenever stale entries outnumber
live ones, so each arrival and pick costs O(log n) amortised. Keys are fixed at arrival, so:

* a key that only grows while its task waits (``last_scheduled``, for a task several workers share)
  is re-read at the head (``recheck_head``) and the entry pushed down when it changed: exact;
* a key that moves while its task waits (queue lengths, rates) is re-read for every READY task once
  per period (``rekey_s`` of the scheduler's clock, and at each ``on_tick`` of a policy that reads the
  period's snapshot): O(n) once a period, and the pick follows the period's rank in between.

Threading: ``arrived`` and the heads run with the scheduler's lock held; ``on_tick`` (the monitor
thread) only bumps the policy's ``period`` counter, which the next pick sees.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, ClassVar

from elastream.policies.base import BasePolicy, TaskView, last_scheduled_key
from elastream.runtime.ready import ReadySet

#: Once a heap holds this many more entries than twice the ready set, it is rebuilt (stale entries dropped).
COMPACT_SLACK = 32


class TaskHeap:
    """READY tasks as ``(key, stamp, task)`` entries, smallest key first."""

    __slots__ = ("key", "entries", "recheck")

    def __init__(self, key: Callable[[Any], Any], recheck: bool = False):
        self.key = key
        self.entries: list[tuple[Any, int, Any]] = []
        self.recheck = recheck

    def push(self, task: Any, stamp: int) -> None:
        heappush(self.entries, (self.key(task), stamp, task))

    def rebuild(self, ready: dict) -> None:
        key = self.key
        self.entries = [(key(t), stamp, t) for t, stamp in ready.items()]
        heapify(self.entries)

    def head(self, ready: dict, index: PolicyIndex) -> Any:
        """The valid entry with the smallest key (stale ones dropped on the way); None when none is left."""
        entries = self.entries
        rechecked = None
        while entries:
            index.looked += 1
            key, stamp, task = entries[0]
            if ready.get(task) != stamp:
                heappop(entries)
                continue
            if self.recheck and task is not rechecked:
                now_key = self.key(task)
                if now_key != key:  # it changed while waiting: push it down to its place, look again
                    heapreplace(entries, (now_key, stamp, task))
                    rechecked = task
                    continue
            return task
        return None


class PolicyIndex:
    """One policy's index over one ready set (see the module docstring)."""

    __slots__ = ("owner", "ready", "primary", "aging", "looked", "_period", "_next_rekey", "_rekey_s")

    def __init__(self, owner: IndexedPolicy):
        self.owner = owner
        self.ready: dict = {}
        self.primary = TaskHeap(owner.index_key, recheck=owner.recheck_head)
        self.aging = TaskHeap(last_scheduled_key, recheck=True) if owner.ages else None
        #: Heap entries examined by the heads so far (what a pick looks at; tests read it).
        self.looked = 0
        self._period = owner.period
        self._rekey_s = owner.rekey_s
        self._next_rekey = float("-inf") if owner.rekey_s is not None else float("inf")

    def attach(self, ready: dict) -> None:
        """Index ``ready`` (the scheduler's ready set, empty when attached)."""
        self.ready = ready

    def arrived(self, task: Any, stamp: int) -> None:
        """``task`` entered the ready set with ``stamp`` (lock held)."""
        primary = self.primary
        primary.push(task, stamp)
        if self.aging is not None:
            self.aging.push(task, stamp)
        if len(primary.entries) > 2 * len(self.ready) + COMPACT_SLACK:
            self.rekey()

    def refresh(self, now: float) -> None:
        """Re-key every READY task if a period has passed (or the policy read a new snapshot) since the last time."""
        if now >= self._next_rekey or self.owner.period != self._period:
            self.rekey_at(now)

    def rekey_at(self, now: float) -> None:
        """Re-key every READY task now; the next periodic re-key is due ``rekey_s`` later."""
        if self._rekey_s is not None:
            self._next_rekey = now + self._rekey_s
        self.rekey()

    def rekey(self) -> None:
        """Every READY task's key read again; stale entries dropped. O(n), once a period."""
        self._period = self.owner.period
        self.owner.rekeying(self.ready)
        self.primary.rebuild(self.ready)
        if self.aging is not None:
            self.aging.rebuild(self.ready)

    def best(self) -> Any:
        """The READY task with the smallest key; None when the ready set is empty."""
        return self.primary.head(self.ready, self)

    def oldest(self) -> Any:
        """The READY task run least recently (policies that age)."""
        heap = self.aging if self.aging is not None else self.primary
        return heap.head(self.ready, self)


class IndexedPolicy(BasePolicy):
    """A policy whose pick reads an index of the ready set instead of scanning it.

    Subclasses define :meth:`index_key` (smaller wins) and set ``recheck_head``, ``ages`` and
    ``rekey_s`` to say how their key behaves (module docstring). ``pick`` called with something other
    than the scheduler's indexed ready set (a list in a test, another scheduler's set) builds a
    one-off index over it: the same choice, at O(n log n).
    """

    #: Re-read the head's key before taking it (keys that only grow while a task waits).
    recheck_head: ClassVar[bool] = False
    #: Keep the least-recently-run heap too (the aging check, :meth:`starving`).
    ages: ClassVar[bool] = False
    #: Re-key every READY task this often (s of the scheduler's clock); None: keys never move while waiting.
    rekey_s: ClassVar[float | None] = None

    def __init__(self, seed: int | None = None):
        super().__init__(seed)
        #: Bumped when the policy reads a new period's snapshot: every index re-keys at its next pick.
        self.period = 0

    def index_key(self, task: TaskView) -> Any:
        """The task's rank among READY tasks (smaller first), read when it arrives and when re-keyed."""
        raise NotImplementedError

    def rekeying(self, ready: Collection[TaskView]) -> None:
        """Called before every READY task is re-keyed (a policy that opens a window then)."""
        return None

    def ready_index(self) -> PolicyIndex:
        """A new index for a scheduler's ready set."""
        return PolicyIndex(self)

    def index_over(self, ready: Collection[TaskView], now: float) -> PolicyIndex:
        """The index of ``ready``, refreshed to ``now``: the scheduler's own, else one built over ``ready``."""
        index = ready.index if type(ready) is ReadySet else None
        if index is None or index.owner is not self:
            index = self.ready_index()
            ReadySet(index).update(ready)
            index.rekey_at(now)  # the keys read once all of ``ready`` is known (qst's threshold counts them)
            return index
        index.refresh(now)
        return index

    def pick(self, ready: Collection[TaskView], now: float) -> TaskView:
        index = self.index_over(ready, now)
        if self.ages:
            old = self._starving_in(index, now)
            if old is not None:
                return old
        return index.best()

    def starving(self, ready: Collection[TaskView], now: float) -> TaskView | None:
        """The least recently run ready operator if it has waited past ``starvation_s`` (the index's head)."""
        return self._starving_in(self.index_over(ready, now), now)

    def _starving_in(self, index: PolicyIndex, now: float) -> TaskView | None:
        oldest = index.oldest()
        return oldest if oldest is not None and now - oldest.last_scheduled > self.starvation_s else None
