"""Multi-process execution: a flow split over worker processes joined by shared-memory rings.

``es.Runner(processes=P, threads=T)`` places operators on P processes
(TurboStream §V placement), runs the core engine in each, and carries every
stream that crosses processes through a :class:`~elastream.ipc.ring.SharedRing`
(TurboStream §IV). Results and statistics come back to the parent and look as
they do for one process.

Ordered data parallelism across processes (C-Stream §4.2): name replicas in
the placement (``"X#0"``, ``"X#1"``, …), e.g. with
:func:`~elastream.processes.replicate.replicated_placement`, and a stateless or
partitioned operator runs as ordered split → replicas on several processes →
ordered merge; the output keeps the sequential order.

The fork server the workers start from (``ProcessConfig(start_method="forkserver")``,
the default) is a long-lived helper: it stops when the interpreter exits, or
at once with :func:`stop_fork_server`.
"""

from elastream.processes.forkserver import stop_fork_server
from elastream.processes.replicate import choose_replicas, replicate_flow, replicated_placement
from elastream.processes.supervisor import ProcessRunHandle, WorkerProcessError

__all__ = ["ProcessRunHandle", "WorkerProcessError", "choose_replicas", "replicate_flow", "replicated_placement",
           "stop_fork_server"]
