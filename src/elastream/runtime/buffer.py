"""Input-port buffers: bounded FIFO queues of tuple chunks (C-Stream §3.2.2).

Threading model: any number of producer threads call :meth:`PortBuffer.offer`
and :meth:`PortBuffer.force`; exactly one consumer at a time (the worker running
the owning operator) calls :meth:`take`, :meth:`take_one` and :meth:`peek`.
Each call is atomic under a small per-buffer lock, and calls move whole chunks,
so the lock is taken per batch rather than per tuple.

Invariants:
* ``count`` equals the number of tuples held; only changed under ``_lock``;
  other threads may read it without the lock (an int read is atomic).
* ``offer`` never lets ``count`` exceed ``capacity``: space is reserved and
  filled in one critical section, so back-pressure is exact. Only ``force``
  (the shutdown overflow rule of Algorithm 3) may exceed it.
* Chunks are owned by the buffer once offered; producers never touch them again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.task import Task


class PortBuffer:
    """The buffer of one operator input port."""

    __slots__ = (
        "_lock", "_chunks", "_head", "count", "capacity", "owner", "port", "publishers",
        "open_publishers", "closed", "write_waiters", "max_count", "writes", "reads",
        "_full_since", "full_time", "created", "name", "dead", "dropped", "last_origin",
    )

    def __init__(self, owner: Task, port: int, capacity: int, name: str):
        self._lock = threading.Lock()
        # Each chunk is [enqueue_time, origin_time, items].
        self._chunks: deque[list[Any]] = deque()
        self._head = 0
        self.count = 0
        self.capacity = capacity
        self.owner = owner
        self.port = port
        self.name = name
        self.publishers: list[Task] = []
        self.open_publishers = 0
        self.closed = False
        # Set once the owning operator has completed: nothing will read again,
        # so offers are counted as dropped instead of blocking producers forever.
        self.dead = False
        self.dropped = 0
        self.last_origin = 0.0
        # Tasks currently WriteBlocked on this buffer (changed under the scheduler lock).
        self.write_waiters: set[Task] = set()
        self.max_count = 0
        self.writes = 0
        self.reads = 0
        self._full_since: float | None = None
        self.full_time = 0.0
        self.created = perf_counter()

    def __len__(self) -> int:
        return self.count

    # -- producer side -------------------------------------------------------
    def offer(self, items: list, origin: float, now: float) -> int:
        """Append as many of ``items`` as fit; return how many were taken."""
        with self._lock:
            if self.dead:
                self.dropped += len(items)
                return len(items)
            free = self.capacity - self.count
            if free <= 0:
                return 0
            n = len(items)
            if n > free:
                items = items[:free]
                n = free
            self._chunks.append([now, origin, items])
            self.count += n
            self.writes += n
            if self.count > self.max_count:
                self.max_count = self.count
            if self.count >= self.capacity and self._full_since is None:
                self._full_since = now
            return n

    def force(self, items: list, origin: float, now: float) -> None:
        """Append all of ``items`` regardless of capacity (shutdown overflow rule)."""
        with self._lock:
            if self.dead:
                self.dropped += len(items)
                return
            self._chunks.append([now, origin, items])
            self.count += len(items)
            self.writes += len(items)
            if self.count > self.max_count:
                self.max_count = self.count

    # -- consumer side -------------------------------------------------------
    def take(self, n: int) -> tuple[list, float]:
        """Remove and return up to ``n`` tuples and the origin time of the oldest.

        Consecutive chunks are merged into one list; the buffer owns its chunks,
        so the first one is extended in place rather than copied.
        """
        with self._lock:
            if self.count == 0 or n <= 0:
                return [], 0.0
            chunks = self._chunks
            first = chunks[0]
            origin = first[1]
            items = first[2]
            head = self._head
            avail = len(items) - head
            if avail > n:
                out = items[head:head + n]
                self._head = head + n
                taken = n
            else:
                out = items if head == 0 else items[head:]
                chunks.popleft()
                self._head = 0
                taken = avail
                while chunks and taken < n:
                    nxt = chunks[0][2]
                    room = n - taken
                    if len(nxt) <= room:
                        out.extend(nxt)
                        taken += len(nxt)
                        chunks.popleft()
                    else:
                        out.extend(nxt[:room])
                        self._head = room
                        taken = n
            self._consumed(taken)
            self.last_origin = origin
            return out, origin

    def take_one(self) -> Any:
        """Remove and return the front tuple; IndexError when empty."""
        with self._lock:
            if self.count == 0:
                raise IndexError(f"pop from empty input port {self.name}")
            first = self._chunks[0]
            items = first[2]
            item = items[self._head]
            self.last_origin = first[1]
            self._head += 1
            if self._head >= len(items):
                self._chunks.popleft()
                self._head = 0
            self._consumed(1)
            return item

    def peek(self) -> Any:
        """The front tuple without removing it; IndexError when empty."""
        with self._lock:
            if self.count == 0:
                raise IndexError(f"peek at empty input port {self.name}")
            return self._chunks[0][2][self._head]

    def rewrite(self, fn: Callable[[list], list | None]) -> int:
        """Let the consumer replace what the buffer holds: ``fn(pending)`` returns the new contents, or None
        to leave them. Producers wait meanwhile, so nothing arrives in between. Returns how many fewer
        tuples it holds (those the consumer took out; counted as read).

        An ordered replica takes a moving key group's tuples back this way (:mod:`elastream.ordered.early_export`).
        """
        with self._lock:
            chunks = self._chunks
            if not chunks:
                return 0
            pending = [x for chunk in chunks for x in chunk[2]][self._head:]
            new = fn(pending)
            if new is None:
                return 0
            first = chunks[0]
            chunks.clear()
            self._head = 0
            if new:
                chunks.append([first[0], first[1], new])
            removed = len(pending) - len(new)
            self._consumed(removed)
            return removed

    def front_times(self) -> tuple[float, float] | None:
        """(enqueue time, origin time) of the front tuple, or None when empty."""
        chunks = self._chunks
        try:
            first = chunks[0]
        except IndexError:
            return None
        return first[0], first[1]

    def _consumed(self, n: int) -> None:
        self.count -= n
        self.reads += n
        if self._full_since is not None and self.count < self.capacity:
            self.full_time += perf_counter() - self._full_since
            self._full_since = None

    # -- statistics -----------------------------------------------------------
    def kill(self) -> int:
        """Mark the buffer dead (its owner completed); drop and return what it held."""
        with self._lock:
            self.dead = True
            held = self.count
            self.dropped += held
            self._chunks.clear()
            self._head = 0
            self.count = 0
            if self._full_since is not None:
                self.full_time += perf_counter() - self._full_since
                self._full_since = None
            return held

    def full_seconds(self, now: float) -> float:
        """Total time this buffer has been full (for the write-blocked ratio, C-Stream §4.2.1)."""
        since = self._full_since
        return self.full_time + (now - since if since is not None else 0.0)

    def __repr__(self) -> str:
        return f"<PortBuffer {self.name} {self.count}/{self.capacity}{' closed' if self.closed else ''}>"
