"""Reconfiguration decisions: frozen records a controller returns and a running flow applies.

Controllers and policies never touch runtime objects (DESIGN.md "Seams"): they
read the per-period statistics and return decisions, each with its reason. A
:class:`~elastream.runtime.handle.RunHandle` takes them through ``submit``,
applies them at one well-defined point (in worker processes through the typed
control channel), checks that they took effect and records them as
:class:`Applied` in the run's timeline.

Threading: immutable values; safe to create anywhere and to pickle to a worker process.

Example::

    handle = es.Runner(threads=1).start(flow)
    applied = handle.submit([SetThreads(2, reason="two operators release the GIL")])
    applied[0].ok     # True once the pool runs two worker threads
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SetThreads:
    """Run ``threads`` worker threads in process ``process`` (0: the parent, or the only one)."""

    threads: int
    process: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SetReplicas:
    """Let ``count`` of operator ``operator``'s replicas take work (the others retire between batches)."""

    operator: str
    count: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MoveKeyGroups:
    """Move the state and the future tuples of ``groups`` of ``operator`` to replica ``target``."""

    operator: str
    groups: tuple[int, ...]
    target: int
    reason: str = ""


Decision = SetThreads | SetReplicas | MoveKeyGroups


@dataclass(frozen=True, slots=True)
class Applied:
    """A decision as the run applied it: ``ok`` when the check after applying it held, else ``why``."""

    decision: Decision
    at_s: float
    """Seconds since the run started."""
    ok: bool
    why: str = ""


@dataclass(frozen=True, slots=True)
class Levels:
    """A running flow's parallelism at one moment: what controllers read and decisions change.

    ``threads[p]`` is the number of worker threads of process ``p`` (0: the parent);
    ``replicas`` the replicas taking work per replicated operator (or fused chain, by its
    first operator's name); ``fused`` the chains running as one task, each as its
    operators' names in flow order.
    """

    threads: tuple[int, ...] = (1,)
    replicas: dict[str, int] = field(default_factory=dict)
    fused: tuple[tuple[str, ...], ...] = ()

    @property
    def processes(self) -> int:
        """Worker processes (the parent included)."""
        return len(self.threads)

    def to_json(self) -> dict:
        """A JSON-ready dict (for the timeline and monitoring)."""
        return {"threads": list(self.threads), "processes": self.processes, "replicas": dict(self.replicas),
                "fused": [list(chain) for chain in self.fused]}
