"""The meeting point of Haren's scheduling task (§6, Algorithm 3): entry barrier, sequential part, exit barrier.

What stands in for the paper's primitives: Java's ``CyclicBarrier`` parks a thread without
spinning, and so does a :class:`threading.Condition`, which is what this is built on; but Python
has no barrier without wake-ups (every release is a ``notify_all`` that each parked worker answers
by taking the GIL), so the two barriers of Algorithm 3 are one crossing here:

* every member *arrives* (the entry barrier); the last to arrive is ``t*`` and runs the sequential
  part while the others stay parked (the paper's exit barrier: they wait for the phase to end);
* ``t*`` ends the phase and wakes them all at once.

Membership is elastic where Java's barrier is fixed: a worker that retires or ends *leaves*, and the
phase completes without it (the elastic pool resizes while a flow runs); a new worker joins.

Threading: any thread may join, leave or cross; the sequential part runs on one thread, outside the
barrier's own lock (so it may take the scheduler's lock without a lock-order cycle).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

#: Longest single wait before a parked worker re-checks whether it should give up (the run ended).
RECHECK_S = 0.05


class PhaseBarrier:
    """Entry barrier + sequential part (run by the last to arrive) + exit barrier, with elastic members."""

    def __init__(self, members: set[Hashable] | None = None):
        self._cond = threading.Condition()
        self._members: set[Hashable] = set(members or ())
        self._arrived: set[Hashable] = set()
        self._generation = 0
        self._sequential_running = False

    @property
    def members(self) -> frozenset[Hashable]:
        """The workers the current phase waits for."""
        with self._cond:
            return frozenset(self._members)

    def join(self, member: Hashable) -> None:
        """``member`` takes part from the next phase on (at once if none is under way)."""
        with self._cond:
            self._members.add(member)

    def leave(self, member: Hashable) -> None:
        """``member`` takes part no more; a phase waiting only for it completes."""
        with self._cond:
            self._members.discard(member)
            self._arrived.discard(member)
            self._cond.notify_all()

    def cross(self, member: Hashable, sequential: Callable[[], None], give_up: Callable[[], bool]) -> bool:
        """Arrive, wait for every member; the last to arrive runs ``sequential()``; True on that worker.

        ``give_up()`` is polled while waiting: True (the run ended) leaves the phase at once and
        returns False without the sequential part having run.
        """
        with self._cond:
            generation = self._generation
            self._members.add(member)
            self._arrived.add(member)
            while True:
                if self._generation != generation:
                    return False                      # t* finished: the exit barrier opens
                if not self._sequential_running and self._arrived >= self._members:
                    self._sequential_running = True   # this worker is t*
                    break
                if give_up():
                    self._arrived.discard(member)
                    return False
                self._cond.wait(RECHECK_S)
        try:
            sequential()
        finally:
            with self._cond:
                self._generation += 1
                self._arrived.clear()
                self._sequential_running = False
                self._cond.notify_all()
        return True
