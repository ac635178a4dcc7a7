"""Ordered parallelism: the concurrent data structures of ordered-multicore §3–§4.

Layer: ordered parallelism, below the runtime mechanism. Nothing here starts
a thread; every structure is thread-safe and is driven by the runtime's
worker threads under "dynamic allotment" (§2.2: several workers on one
operator at once, up to its maximum degree of parallelism — 1 for stateful,
``partitions`` for partitioned stateful, unbounded for stateless, §6).

* :mod:`~elastream.ordered.serial` — serial numbers assigned at enqueue
  (:class:`SerialCounter`, the stateless operator's worklist
  :class:`SerialQueue`).
* :mod:`~elastream.ordered.reorder` — reorder buffers that release outputs in
  serial order: ``make_reorder_buffer("nonblocking" | "lock", capacity, emit)``
  (Fig. 4 / Fig. 2).
* :mod:`~elastream.ordered.partitioning` — the partitioned-input interface and
  hash / range partitioners; ``make_partitioned_input("hybrid" |
  "partitioned", partitions, ...)``.
* :mod:`~elastream.ordered.hybrid_queue` — Fig. 7 hybrid queue.
* :mod:`~elastream.ordered.partitioned_queue` — §4.2 partitioned-queue baseline.

A stateless operator is ``SerialQueue`` → workers → reorder buffer; a
partitioned stateful one is partitioned input → workers → reorder buffer
(§5). Each module docstring says how the runtime should call it.
"""

from __future__ import annotations

from elastream.ordered.hybrid_queue import HybridQueue
from elastream.ordered.partitioned_queue import PartitionedQueue
from elastream.ordered.partitioning import (PARTITION_STRATEGIES, PARTITIONING_SCHEMES, Claim, HashPartitioner,
                                            PartitionedInput, PartitionedInputStats, RangePartitioner,
                                            make_partitioned_input, make_partitioner)
from elastream.ordered.reorder import (REORDER_SCHEMES, LockReorderBuffer, NonBlockingReorderBuffer,
                                       ReorderBuffer, ReorderStats, make_reorder_buffer)
from elastream.ordered.serial import SerialCounter, SerialQueue, SerialQueueStats, ThreadCounters

__all__ = [
    "PARTITIONING_SCHEMES", "PARTITION_STRATEGIES", "REORDER_SCHEMES",
    "Claim", "HashPartitioner", "HybridQueue", "LockReorderBuffer", "NonBlockingReorderBuffer",
    "PartitionedInput", "PartitionedInputStats", "PartitionedQueue", "RangePartitioner", "ReorderBuffer",
    "ReorderStats", "SerialCounter", "SerialQueue", "SerialQueueStats", "ThreadCounters",
    "make_partitioned_input", "make_partitioner", "make_reorder_buffer",
]
