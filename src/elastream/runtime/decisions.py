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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar


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
    replicas: tuple[int, ...] | None = None
    """Which replicas (indexes) take work; None: the first ``count``, or the run's choice
    (:mod:`elastream.processes.replica_choice`)."""


#: What an applied ``SetReplicas`` says when its unit moved whole into the one replica's process
#: (:mod:`elastream.runtime.bypass`) rather than routing through its split: ``Applied.why``.
MOVED_WHOLE = "moved whole into the replica's process"


@dataclass(frozen=True, slots=True)
class MoveKeyGroups:
    """Move the state and the future tuples of ``groups`` of ``operator`` to replica ``target``."""

    operator: str
    groups: tuple[int, ...]
    target: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SetProcesses:
    """Run the flow over ``count`` worker processes (the parent included).

    What a GIL-aware thread controller proposes when more threads add busy
    time but no CPU time: the CPU has to come from processes instead.
    """

    count: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Fuse:
    """Run ``chain`` (consecutive stateless operators, names in flow order) as one task."""

    chain: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Unfuse:
    """Run the operators of the fused ``chain`` as separate tasks again."""

    chain: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HotKey:
    """Informational: key group ``group`` carries ``share`` of operator ``operator``'s load.

    More replicas cannot help a hot key group (all of its tuples go to one
    replica), so the timeline names it and the replica controller does not
    add replicas for ``operator``. Applying it changes nothing.
    """

    operator: str
    group: int
    share: float
    reason: str = ""
    informational: ClassVar[bool] = True
    """Recorded in the timeline, never submitted to the run."""


Decision = SetThreads | SetReplicas | MoveKeyGroups | SetProcesses | Fuse | Unfuse | HotKey


def fused_after(fused: Sequence[tuple[str, ...]], decision: Fuse | Unfuse) -> tuple[tuple[str, ...], ...]:
    """The fused chains once ``decision`` took effect: an un-fused chain leaves; a fused one replaces the
    chains inside it, where the first of them was (at the end when none was).

    Example: ``fused_after([("a", "b")], Fuse(("a", "b", "c"))) == (("a", "b", "c"),)``
    """
    chain = tuple(decision.chain)
    if isinstance(decision, Unfuse):
        return tuple(c for c in fused if c != chain)
    inside = [i for i, c in enumerate(fused) if set(c) <= set(chain)]
    at = inside[0] if inside else len(fused)
    kept = [c for i, c in enumerate(fused) if i not in inside]
    return tuple(kept[:at] + [chain] + kept[at:] if chain not in kept else kept)


@dataclass(frozen=True, slots=True)
class Applied:
    """A decision as the run applied it: ``ok`` when the check after applying it held, else ``why``."""

    decision: Decision
    at_s: float
    """Seconds since the run started."""
    ok: bool
    why: str = ""
    pause_ms: float | None = None
    """How long applying it held the streams it touches, as the part that applied it measured it (the
    time inside its reconfiguration point; None: not measured, e.g. a decision only recorded)."""


@dataclass(frozen=True, slots=True)
class Levels:
    """A running flow's parallelism at one moment: what controllers read and decisions change.

    ``threads[p]`` is the number of worker threads of process ``p`` (0: the parent);
    ``replicas`` the replicas taking work per replicated operator (or fused chain, by its
    first operator's name); ``fused`` the chains running as one task, each as its
    operators' names in flow order; ``held`` True when the processes beyond those the
    replicas use are held ready (``Runner()``: replica ``r`` of each unit runs in process ``r``,
    everything else in process 0); ``bypassed`` True when units run through bypasses until they
    spread (the parts hosting them keep their chains as built); ``moved`` the units running whole in
    another process (unit → process: one replica there takes all its work).
    """

    threads: tuple[int, ...] = (1,)
    replicas: dict[str, int] = field(default_factory=dict)
    fused: tuple[tuple[str, ...], ...] = ()
    held: bool = False
    bypassed: bool = False
    moved: dict[str, int] = field(default_factory=dict)

    @property
    def chains_as_built(self) -> bool:
        """True when the parts host units' bypasses (held or bypassed): no Fuse / Unfuse applies."""
        return self.held or self.bypassed

    @property
    def processes(self) -> int:
        """Worker processes (the parent included), held ones too."""
        return len(self.threads)

    @property
    def working_processes(self) -> int:
        """Processes taking work: all of them, or with processes held ready those the replicas use."""
        if not self.held:
            return self.processes
        return max([1, *self.replicas.values(), *(p + 1 for p in self.moved.values())])

    def to_json(self) -> dict:
        """A JSON-ready dict (for the timeline and monitoring)."""
        return {"threads": list(self.threads), "processes": self.working_processes,
                "held_processes": self.processes - self.working_processes, "replicas": dict(self.replicas),
                "fused": [list(chain) for chain in self.fused], "moved": dict(self.moved)}
