"""Partitioned-queue baseline: one queue per partition, statically owned by a worker (ordered-multicore §4.2).

Role
----
The predominant (Volcano-style) way to run a partitioned stateful operator
on several workers, kept as the baseline the hybrid queue is measured
against (§7.2). Producers append each tuple to its partition's queue; each
partition is *statically* assigned to one worker slot (partition ``i`` to
slot ``i % workers``; with ``partitions == workers``, as in §7.2, one queue
per worker). A worker only ever takes from its own partitions, so no
concurrency control between workers is needed — but a worker whose
partitions are empty idles while another's overflow (skew, Fig. 9), and its
outputs run ahead of the other queues' and wait in the reorder buffer
(Fig. 6, Fig. 10).

Threading model
---------------
Any thread may call any method; one internal lock guards a few deque
operations per call. ``take(budget, worker=w)`` serves slot ``w % workers``;
with ``worker=None`` the calling thread is bound to a slot on its first
``take`` (first come, first slot; threads beyond ``workers`` share slots
round-robin, and a per-partition claim flag still keeps two of them off one
partition). Every slot needs a worker that keeps calling ``take``, or its
partitions are never drained — that is the static assignment's limitation,
not a bug. See :mod:`elastream.ordered.partitioning` for how the runtime
calls it; the contract (exclusive claims, per-partition FIFO, ``done``
exactly once per claim) is the hybrid queue's.
"""

from __future__ import annotations

import threading

from elastream.ordered.partitioning import Claim, Partitioner, PartitionedInputBase, PartitionedInputStats, pop_items

__all__ = ["PartitionedQueue"]


class PartitionedQueue(PartitionedInputBase):
    """§4.2 partitioned queues with a static partition → worker-slot assignment.

    Example::

        >>> from elastream.ordered.partitioning import HashPartitioner
        >>> q = PartitionedQueue(HashPartitioner(2), 2)
        >>> q.put_many([(0, "a0"), (1, "b0"), (0, "a1")])
        range(0, 3)
        >>> q.take(8, worker=1).items         # slot 1 owns partition 1 only
        [(1, 1, 'b0')]
        >>> q.take(8, worker=1) is None       # ...and never helps with partition 0
        True
    """

    scheme = "partitioned"

    def __init__(self, partitioner: Partitioner, partitions: int, *, workers: int | None = None,
                 first_serial: int = 0) -> None:
        super().__init__(partitioner, partitions, first_serial=first_serial)
        self.workers = partitions if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        # Static assignment: slot w owns partitions w, w + workers, w + 2*workers, ...
        self._groups = [list(range(w, partitions, self.workers)) for w in range(self.workers)]
        self._cursor = [0] * self.workers  # round-robin position within each group
        self._bindings: dict[int, int] = {}

    def slot_of(self, worker: int | None = None) -> int:
        """The worker slot ``take(worker=worker)`` would serve (binding the calling thread if needed)."""
        with self._lock:
            return self._slot(worker)

    def take(self, budget: int, worker: int | None = None) -> Claim | None:
        """Claim the next non-empty, unclaimed partition of this worker's slot (round-robin), or None."""
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        with self._lock:
            w = self._slot(worker)
            group, start = self._groups[w], self._cursor[w]
            for k in range(len(group)):
                p = group[(start + k) % len(group)]
                queue = self._queues[p]
                if queue and not self._active[p]:
                    self._cursor[w] = (start + k + 1) % len(group)
                    return self._claim(p, pop_items(queue, min(budget, len(queue))))
            self._empty_takes += 1
            return None

    def claimable(self, slots: object = None) -> bool:
        """Would a worker serving ``slots`` (None: every slot) find an unclaimed partition with queued tuples?"""
        with self._lock:
            chosen = range(self.workers) if slots is None else [w % self.workers for w in slots]  # type: ignore[attr-defined]
            return any(self._queues[p] and not self._active[p] for w in chosen for p in self._groups[w])

    def done(self, partition: int) -> None:
        """Release a claim."""
        with self._lock:
            self._release(partition)

    def statistics(self) -> PartitionedInputStats:
        """A frozen snapshot, taken under the lock."""
        with self._lock:
            return self._stats()

    def _slot(self, worker: int | None) -> int:
        if worker is not None:
            return worker % self.workers
        ident = threading.get_ident()
        slot = self._bindings.get(ident)
        if slot is None:
            slot = self._bindings[ident] = len(self._bindings) % self.workers
        return slot
