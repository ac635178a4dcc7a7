"""Worker processes held ready but not started yet: when they start, and how a run ends without them.

A plain ``Runner()`` holds a replica of each unit in one worker process per
further core (:mod:`elastream.elastic.held`). Starting a worker costs a
warm fork helper about 50 ms (the program's first start about half a second),
the parent's GIL while it pickles their parts and a core while they boot,
which a flow running in one thread feels; and a flow whose units DS2 never
spreads never needs one. So the held workers start when a decision adds a
replica (:meth:`HeldWorkers.ask`), and not before. The fork helper, whose first start
is the slow one, boots as the run starts (:func:`~elastream.processes.spawn.warm_fork_server`).

Until then nothing is sent to them: only a decision routes work to a held
replica, and the rings are there from the start, so what a decision sends waits
in them until the worker attaches. Their pages are reserved only as the workers
start, and part 0 maps them only as it uses them: a run that never starts its
held workers pays neither (~3 ms of a run's start and end). A flow that ends
first has sent nothing: once every stream into the waiting workers has ended
empty, their streams out are ended in their name (registered and closed as
their one producer), so part 0's ring receivers end as they would after the
workers' own end, and the workers are never started. Part 0's senders into
those streams wake the supervisor as they complete (:meth:`HeldWorkers.poke`),
so the flow's end is not left to the supervisor's next look.

Threading: the supervisor thread calls everything but :meth:`HeldWorkers.ask`,
which the thread submitting decisions calls (it only sets a flag and writes
one byte to wake the supervisor).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from elastream.ordered.replicate import parse_replica_name
from elastream.processes.spec import ChildSpec

#: Longest the supervisor sleeps, while workers wait unstarted, before it looks whether the flow ended
#: without them: a safety net only, since part 0's senders into them poke it as they complete and a
#: decision that needs them pokes it too. Each look takes the GIL from part 0's worker (at 0.05 s, the
#: looks alone made 20 wake-ups a second of a light flow's one thread).
IDLE_CHECK_S = 0.5


def workers_can_wait(assignment: dict[str, int], active: dict[str, tuple[int, ...]] | None) -> bool:
    """True when every worker process (all but process 0) runs only replicas that take no work yet, so
    they can wait unstarted (``Runner()``); a worker with any other operator starts with the run
    (``Runner(processes=P)`` places units' homes there)."""
    if active is None:
        return False
    for name, process in assignment.items():
        parsed = parse_replica_name(name)
        if process != 0 and (parsed is None or parsed[0] not in active or parsed[1] in active[parsed[0]]):
            return False
    return True


class HeldWorkers:
    """The worker specs a run holds ready and has not started (all start together, or none)."""

    def __init__(self, specs: Iterable[ChildSpec], rings: Iterable[Any]):
        self.specs = list(specs)
        #: The rings to and from these workers; their pages are reserved only as the workers start.
        self.ring_names = frozenset(ce.ring_name for s in self.specs for ce in (*s.incoming, *s.outgoing))
        self._rings = {ring.name: ring for ring in rings if ring.name in self.ring_names}
        """Their owner handles (the supervisor's: it closes and unlinks them)."""
        self._asked = threading.Event()
        self._pipe_lock = threading.Lock()  # poke never writes to a closed descriptor's number (reused by now)
        self.fd, self._wake = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._wake, False)

    @property
    def waiting(self) -> bool:
        """True while workers wait to be started."""
        return bool(self.specs)

    def ask(self) -> None:
        """A decision needs the workers: start them at the supervisor's next look (any thread)."""
        if self.specs and not self._asked.is_set():
            self._asked.set()
            self.poke()

    def poke(self) -> None:
        """Wake the supervisor for a look now (any thread, under any lock: it writes one byte)."""
        with self._pipe_lock:
            if self._wake < 0:
                return
            try:
                os.write(self._wake, b"!")
            except OSError:
                pass  # a full pipe: a wake-up is pending anyway

    def feeding(self, part: ChildSpec) -> list[str]:
        """The senders of ``part`` that write into the waiting workers' streams."""
        into = {ce.ring_name for s in self.specs for ce in s.incoming}
        return [ce.sender_name for ce in part.outgoing if ce.ring_name in into]


    def due(self) -> bool:
        """True when the waiting workers should start now (a decision asked for them)."""
        return bool(self.specs) and self._asked.is_set()

    def timeout(self) -> float | None:
        """Longest sleep of the supervisor before its next look (None: nothing waits)."""
        return IDLE_CHECK_S if self.specs else None

    def take(self) -> list[ChildSpec]:
        """The specs to start now (the waiting ones, all of them), once their rings have all their pages (a full
        ``/dev/shm`` raises OSError here, before any worker starts, rather than a SIGBUS on a later write)."""
        for ring in self._rings.values():
            ring.reserve_pages()
        specs, self.specs = self.specs, []
        return specs

    def end_if_idle(self) -> bool:
        """End the waiting workers' output streams when every stream into them ended empty; True if so."""
        if not self.specs or not all(self._ended_empty(ce.ring_name) for s in self.specs for ce in s.incoming):
            return False
        for spec in self.specs:
            for ce in spec.outgoing:
                ring = self._rings[ce.ring_name]
                ring.close_producer(ring.register_producer())
        self.specs = []
        return True

    def drop(self) -> None:
        """Forget the waiting workers (the run stops: part 0's receivers end on its shutdown)."""
        self.specs = []

    def close(self) -> None:
        """Release the wake pipe and forget the rings (the supervisor's last step; it closes them)."""
        self.specs = []
        self._rings = {}
        with self._pipe_lock:
            fds, self._wake = (self.fd, self._wake), -1
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def _ended_empty(self, ring_name: str) -> bool:
        stats = self._rings[ring_name].statistics()
        return (stats.producers_registered > 0 and stats.producers_closed >= stats.producers_registered
                and stats.records_written == 0)

    def clear_wakes(self) -> None:
        """Forget the wake-ups written so far (the supervisor's look is under way)."""
        try:
            while os.read(self.fd, 64):
                pass
        except OSError:
            pass
