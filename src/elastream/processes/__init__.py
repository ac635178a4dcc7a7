"""Multi-process execution: a flow split over worker processes joined by shared-memory rings.

``es.Runner(processes=P, threads=T)`` places operators on P processes
(TurboStream §V placement), runs the core engine in each, and carries every
stream that crosses processes through a :class:`~elastream.ipc.ring.SharedRing`
(TurboStream §IV). Results and statistics come back to the parent and look as
they do for one process.
"""

from elastream.processes.supervisor import ProcessRunHandle, WorkerProcessError

__all__ = ["ProcessRunHandle", "WorkerProcessError"]
