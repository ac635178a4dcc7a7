"""Indexes over the ready set, so that a pick costs O(log n) amortised, not a scan of every READY task.

A policy derived from :class:`IndexedPolicy` gives the scheduler an index (``ready_index()``),
attached to the scheduler's ready set (a dict of READY tasks to arrival stamps, see
:mod:`elastream.runtime.ready`). At a pick the index first takes in the tasks that arrived since
the last one (walking the dict backwards to the first stamp it has seen), then reads its heads:

* ``best()`` — the READY task with the smallest ``policy.index_key(task)`` (ties: the earliest
  arrival), computed when the index takes the task in;
* ``oldest()`` — the READY task run least recently (the aging check, :meth:`IndexedPolicy.starving`),
  kept only by policies that age (``ages = True``).

An entry is stale once its task left the ready set or arrived again (its stamp no longer matches);
a head that is stale is dropped when met, and the heaps are rebuilt whenever they hold more than
twice the ready set, so each arrival and pick costs O(log n) amortised. Keys are fixed when taken in:

* a key that only grows while its task waits (``last_scheduled``, for a task several workers share)
  is re-read at the head (``recheck_head``) and the entry pushed down when it changed: exact;
* a key that moves while its task waits (queue lengths, rates) is re-read for every READY task once
  per period (``rekey_s`` of the scheduler's clock, and at each ``on_tick`` of a policy that reads the
  period's snapshot): O(n) once a period, and the pick follows the period's rank in between.

With at most :data:`SMALL_READY` READY tasks a pick scans them instead (keys read at the pick): at
that size a scan is cheaper than the heaps' upkeep, and still bounded whatever the flow's size.

Threading: the index runs with the scheduler's lock held (inside ``pick``); ``on_tick`` (the
monitor thread) only bumps the policy's ``period`` counter, which the next pick sees.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, ClassVar

from elastream.policies.base import BasePolicy, TaskView, last_scheduled_key
from elastream.runtime.ready import next_stamp

#: Once a heap holds this many more entries than twice the ready set, it is rebuilt (stale entries dropped).
COMPACT_SLACK = 32
#: Up to this many READY tasks a pick scans them (cheaper than keeping the heaps at that size).
SMALL_READY = 8


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

    __slots__ = ("owner", "ready", "primary", "aging", "looked", "synced", "_seen", "_period", "_next_rekey",
                 "_rekey_s")

    def __init__(self, owner: IndexedPolicy):
        self.owner = owner
        self.ready: dict = {}
        self.primary = TaskHeap(owner.index_key, recheck=owner.recheck_head)
        self.aging = TaskHeap(last_scheduled_key, recheck=True) if owner.ages else None
        #: Heap entries (or, for a small ready set, tasks) examined by picks so far: what a pick looks at.
        self.looked = 0
        #: False until the heaps hold the whole ready set (and again after a pick scanned it instead).
        self.synced = False
        self._seen = 0
        self._period = owner.period
        self._rekey_s = owner.rekey_s
        self._next_rekey = float("inf")

    def attach(self, ready: dict) -> None:
        """Follow ``ready``, a scheduler's ready set; the policy's picks on it read this index."""
        self.ready = ready
        self.synced = False
        self.owner.indexed = self

    def up_to_date(self, now: float) -> None:
        """Take in the arrivals since the last pick, or re-key every READY task when a period has passed."""
        if not self.synced or now >= self._next_rekey or self.owner.period != self._period:
            self.rekey_at(now)
            return
        primary, aging, seen = self.primary, self.aging, self._seen
        newest = seen
        for task, stamp in reversed(self.ready.items()):
            if stamp is None:  # a writer that stored no stamp: take in the whole set again
                self.rekey_at(now)
                return
            if stamp <= seen:
                break
            if stamp > newest:
                newest = stamp
            primary.push(task, stamp)
            if aging is not None:
                aging.push(task, stamp)
        self._seen = newest
        if len(primary.entries) > 2 * len(self.ready) + COMPACT_SLACK:
            self.rekey()

    def rekey_at(self, now: float) -> None:
        """Re-key every READY task now; the next periodic re-key is due ``rekey_s`` later."""
        self._next_rekey = now + self._rekey_s if self._rekey_s is not None else float("inf")
        self.rekey()

    def rekey(self) -> None:
        """Every READY task's key read again, stale entries dropped: O(n), once a period."""
        ready = self.ready
        for task, stamp in ready.items():
            if stamp is None:
                ready[task] = next_stamp()  # a value, not a key, changes: the walk goes on
        self._period = self.owner.period
        self.owner.rekeying(ready)
        self.primary.rebuild(ready)
        if self.aging is not None:
            self.aging.rebuild(ready)
        self._seen = max(ready.values(), default=self._seen)
        self.synced = True

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
        #: The index attached to a scheduler's ready set (the latest, if one policy serves several).
        self.indexed: PolicyIndex | None = None

    def index_key(self, task: TaskView) -> Any:
        """The task's rank among READY tasks (smaller first), read when it arrives and when re-keyed."""
        raise NotImplementedError

    def rekeying(self, ready: Collection[TaskView]) -> None:
        """Called before every READY task is re-keyed (a policy that opens a window then)."""
        return None

    def ready_index(self) -> PolicyIndex:
        """A new index, for a scheduler to attach to its ready set."""
        return PolicyIndex(self)

    def pick(self, ready: Collection[TaskView], now: float) -> TaskView:
        index = self.indexed
        if index is None or index.ready is not ready:
            index = self.one_off_index(ready, now)  # not the scheduler's set: the same choice, O(n log n)
        elif len(ready) <= SMALL_READY:
            index.synced = False  # the heaps miss what arrives meanwhile: rebuilt when the set grows again
            if self.ages:
                return self._scan(ready, now)
            return min(ready, key=self.index_key)
        else:
            index.up_to_date(now)
        if self.ages:
            old = self._starving_in(index, now)
            if old is not None:
                return old
        return index.best()

    def one_off_index(self, ready: Collection[TaskView], now: float) -> PolicyIndex:
        """An index built over ``ready`` alone (a list in a test, a set it does not follow)."""
        index = PolicyIndex(self)
        index.ready = {task: next_stamp() for task in ready}
        index.rekey_at(now)
        return index

    def starving(self, ready: Collection[TaskView], now: float) -> TaskView | None:
        """The least recently run ready operator if it has waited past ``starvation_s``."""
        index = self.indexed
        if index is None or index.ready is not ready or len(ready) <= SMALL_READY:
            return super().starving(ready, now)
        index.up_to_date(now)
        return self._starving_in(index, now)

    def _scan(self, ready: Collection[TaskView], now: float) -> TaskView:
        """A small ready set's pick: the same order, keys read now (ties: the earliest arrival)."""
        if self.ages:
            old = super().starving(ready, now)
            if old is not None:
                return old
        return min(ready, key=self.index_key)

    def _starving_in(self, index: PolicyIndex, now: float) -> TaskView | None:
        oldest = index.oldest()
        return oldest if oldest is not None and now - oldest.last_scheduled > self.starvation_s else None
