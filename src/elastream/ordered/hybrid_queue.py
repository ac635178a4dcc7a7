"""Hybrid queue: partitioned parallelism that processes in (almost) arrival order (ordered-multicore §4.3, Fig. 7).

Role
----
The input of a partitioned stateful operator run by several workers at once
("dynamic allotment", §2.2). It keeps

* one FIFO queue per partition holding the tuples ``(serial, key, item)``;
* the *master queue*: one partition id per tuple, in arrival order (Fig. 7
  ``masterQueue``) — what workers consume, so work is handed out in arrival
  order and the downstream reorder buffer rarely waits (§4, §7.2.2);
* per-partition counters that *delegate* work to the partition's active
  worker. Fig. 7's ``count[p]`` is split in two here: ``active[p]`` (a worker
  holds a claim on ``p``) and ``delegated[p]`` (master entries of ``p``
  already dequeued whose tuples wait for ``p``'s next holder);
* a *ready queue* of partitions that have delegated work and are not active
  — where ``done`` re-queues a partition when more work arrived for it
  while it was being processed.

The algorithm (Fig. 7, with a per-call budget instead of an endless loop)
-------------------------------------------------------------------------
``put`` (Fig. 7 ``addInput``): append to the partition queue, then the
partition id to the master queue.

``take(budget)`` (one bounded step of ``consumeInputs``):

1. A partition in the ready queue comes first (its delegated tuples are the
   oldest unprocessed ones): claim it and hand out up to ``budget`` of them.
2. Otherwise dequeue master entries. An entry for a partition that is active
   or has delegated work is *handed over* (``delegated[p] += 1``, Fig. 7 L10
   when ``fetch_add`` returns non-zero) and the worker moves on — it never
   waits. The first entry for an idle partition is claimed (Fig. 7 L10 when
   ``fetch_add`` returns 0), and further entries of that partition at the
   head of the master queue join the batch, up to ``budget``.

``done(p)`` (Fig. 7 L14, the ``fetch_sub``): release ``p``; if work was
delegated to it meanwhile, put it on the ready queue.

Invariants (Theorem 4.1)
------------------------
1. At most one claim per partition at a time: only ``take`` sets
   ``active[p]``, only when it was False, and only ``done`` clears it.
2. Each tuple is handed out exactly once, and a partition's tuples in FIFO
   order: tuples are only ever popped from the front of their partition
   queue, by the holder of the partition's claim.
3. Every tuple's master entry is dequeued after the tuple was appended to
   its partition queue, and a partition holds at least as many tuples as
   ``delegated[p]`` plus the master entries of ``p`` still queued — so the
   pops in (2) never find the queue empty.
4. No stranded work: a partition with ``delegated[p] > 0`` is either active
   (its holder's ``done`` re-queues it) or on the ready queue.

Threading model
---------------
Any thread may call any method. State is guarded by one internal lock held
for a few deque operations (CPython has no fetch-add, so the counter updates
of Fig. 7 are made atomic by this short lock); it is never held while a tuple
is processed, so no worker waits for another worker's processing — the
progress property of §4.3. ``take`` costs O(1) per master entry it
dequeues, and each entry is dequeued once. See
:mod:`elastream.ordered.partitioning` for how the runtime calls it.
"""

from __future__ import annotations

from collections import deque

from elastream.ordered.partitioning import (Claim, Entry, Partitioner, PartitionedInputBase,
                                            PartitionedInputStats, pop_items)

__all__ = ["HybridQueue"]


class HybridQueue(PartitionedInputBase):
    """Fig. 7 hybrid queue: per-partition queues + master queue + delegation counters.

    Example::

        >>> from elastream.ordered.partitioning import HashPartitioner
        >>> q = HybridQueue(HashPartitioner(2), 2)
        >>> q.put_many([(0, "a0"), (1, "b0"), (0, "a1")])
        range(0, 3)
        >>> first = q.take(8)                 # claims partition 0 (entry "a0")
        >>> q.take(8).items                   # "b0" goes to another worker; "a1" is delegated to partition 0
        [(1, 1, 'b0')]
        >>> q.done(first.partition)           # delegated work arrived: partition 0 is re-queued
        >>> q.take(8).items
        [(2, 0, 'a1')]
    """

    scheme = "hybrid"

    def __init__(self, partitioner: Partitioner, partitions: int, *, first_serial: int = 0,
                 claim_ahead: bool = False) -> None:
        super().__init__(partitioner, partitions, first_serial=first_serial)
        self.claim_ahead = claim_ahead
        self._master: deque[int] = deque()
        self._delegated = [0] * partitions
        self._skip = [0] * partitions   # master entries whose tuples a claim already took ahead of them
        self._ready: deque[int] = deque()
        self._delegations = 0
        self._requeues = 0

    # put / put_many come from PartitionedInputBase; this adds the master entry (Fig. 7 L4-5).
    def _enqueue(self, p: int, entry: Entry) -> None:
        super()._enqueue(p, entry)
        self._master.append(p)

    def take(self, budget: int, worker: int | None = None) -> Claim | None:
        """Claim a partition and up to ``budget`` of its tuples (arrival order), or None; never waits.

        ``worker`` is accepted for interface compatibility and ignored: any
        worker may take any partition.
        """
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        with self._lock:
            if self._ready:
                return self._take_ready(budget)
            return self._take_master(budget)

    def _take_ready(self, budget: int) -> Claim:
        p = self._ready.popleft()
        n = min(budget, self._delegated[p])
        self._delegated[p] -= n
        return self._claim(p, self._pop_ahead(p, n, budget) if self.claim_ahead else pop_items(self._queues[p], n))

    def _take_master(self, budget: int) -> Claim | None:
        master, active, delegated, skip = self._master, self._active, self._delegated, self._skip
        while master:
            p = master.popleft()
            if skip[p]:
                skip[p] -= 1       # its tuple already left with an earlier claim of p (claim_ahead)
                continue
            if active[p] or delegated[p]:
                delegated[p] += 1  # Fig. 7 L10, fetch_add != 0: hand the tuple to p's worker
                self._delegations += 1
                continue
            # Fig. 7 L10, fetch_add == 0: this worker becomes p's active worker
            if self.claim_ahead:
                return self._claim(p, self._pop_ahead(p, 1, budget))
            n = 1                  # ... and takes the run of p at the head of the master queue
            while n < budget and master and master[0] == p:
                master.popleft()
                n += 1
            return self._claim(p, pop_items(self._queues[p], n))
        self._empty_takes += 1
        return None

    def _pop_ahead(self, p: int, owed: int, budget: int) -> list:
        """``claim_ahead``: the ``owed`` tuples of ``p`` and, up to ``budget``, the ones queued behind them.

        Fig. 7 hands out one master entry at a time, so when keys interleave a
        claim holds one tuple — cheap with C++ atomics, several µs of locking
        per tuple in Python. Taking the partition's queued tuples along
        (their master entries are skipped when they come up) keeps claims at
        ``budget`` tuples; per-partition order is unchanged, and the reorder
        buffer absorbs the tuples that now run ahead of older ones of other
        partitions.
        """
        queue = self._queues[p]
        n = min(budget, len(queue))
        self._skip[p] += n - owed
        return pop_items(queue, n)

    def claimable(self, slots: object = None) -> bool:
        """Would a ``take`` find work now? A re-queued partition, or a master entry of a partition nobody holds.

        Work delegated to an active partition is for its holder only, so it
        does not count (another worker would find nothing). ``slots`` is ignored.
        """
        with self._lock:
            if self._ready:
                return True
            active, delegated, skip = self._active, self._delegated, list(self._skip)
            for p in self._master:
                if skip[p]:
                    skip[p] -= 1
                elif not active[p] and not delegated[p]:
                    return True
            return False

    def done(self, partition: int) -> None:
        """Release a claim (Fig. 7 L14); re-queue the partition if work was delegated to it meanwhile."""
        with self._lock:
            self._release(partition)
            if self._delegated[partition]:
                self._ready.append(partition)
                self._requeues += 1

    def statistics(self) -> PartitionedInputStats:
        """A frozen snapshot, taken under the lock."""
        with self._lock:
            return self._stats(self._delegations, self._requeues)
