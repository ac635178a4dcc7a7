"""The fusion rule: once the thread level changes, fuse as compilation would have at the new level.

Fusion depends on the thread count (:func:`~elastream.runtime.fusion.find_chains`):
on one thread every fusable chain runs as one task; on several, only members
that several workers may run fuse, and a member bound to one worker (a
``Busy``, a sink-like map) runs as a task of its own so that its neighbours
can run beside it. A run that starts at one thread and whose thread controller
raises the level would keep the one-thread fusion; this rule proposes the
fusion of the new level instead: ``Unfuse`` for a chain that must come apart
(the runtime splits it into what ``find_chains`` fuses at the pool's current
count), ``Fuse`` for each chain of the new level (one the split already made is
answered "already runs as one task"), each with its reason.

The rule reads only the period's statistics and the levels; what it knows of
the flow is a frozen :class:`FusionPlan` made before the run (the chains at one
thread and at several, and which members take one worker at a time).

Threading: one instance per elastic loop, called from its thread.

Example::

    rule = FusionRule(FusionPlan(one_thread=(("a", "slow", "b", "c"),), several_threads=(("b", "c"),),
                                 single_worker=frozenset({"slow"})))
    rule.decide(period, Levels(threads=(2,), fused=(("a", "slow", "b", "c"),)), None)
    # [Unfuse(("a", "slow", "b", "c"), reason="2 threads: slow takes one worker at a time ..."),
    #  Fuse(("b", "c"), reason="2 threads: b → c may run on several workers at once: one shared task")]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Fuse, Levels, Unfuse
from elastream.runtime.fusion import find_chains, fusable

if TYPE_CHECKING:  # pragma: no cover
    from elastream.elastic.controller import Machine
    from elastream.graph.flow import Flow

#: Periods before a fusion the run refused (or did not reach) is proposed again at the same thread level.
RETRY_PERIODS = 4


@dataclass(frozen=True, slots=True)
class FusionPlan:
    """What a flow fuses at one thread and at several (``find_chains``), made once before the run."""

    one_thread: tuple[tuple[str, ...], ...] = ()
    several_threads: tuple[tuple[str, ...], ...] = ()
    single_worker: frozenset[str] = field(default_factory=frozenset)
    """Fusable operators that take one worker at a time (they run alone on several threads)."""

    @classmethod
    def of(cls, flow: Flow, fuse: bool = True) -> FusionPlan:
        """The plan of ``flow`` (reads its operators' specs; runs nothing); empty with fusion off."""
        if not fuse:
            return cls()
        ops = {name: handle.operator for name, handle in flow.operators.items()}
        specs = {name: op.spec() for name, op in ops.items()}
        single = frozenset(n for n, op in ops.items() if fusable(op, specs[n]) and specs[n].max_workers <= 1)
        return cls(tuple(find_chains(flow, specs, ops, 1)), tuple(find_chains(flow, specs, ops, 2)), single)

    def at(self, threads: int) -> tuple[tuple[str, ...], ...]:
        """The chains fused at ``threads`` worker threads."""
        return self.one_thread if threads <= 1 else self.several_threads


class FusionRule:
    """Proposes the fusion of the thread level in force (process 0's), after that level changes."""

    name = "fusion"

    def __init__(self, plan: FusionPlan):
        self.plan = plan
        self._proposed_at: int | None = None   # the thread level of the last proposal
        self._periods_since = 0

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None = None) -> list[Decision]:
        """Unfuse and Fuse decisions turning ``levels.fused`` into the plan's chains at ``levels.threads[0]``."""
        self._periods_since += 1
        if levels.processes != 1 or not levels.threads:
            return []                      # chains are regrouped in a one-process run only
        threads = levels.threads[0]
        target = [c for c in self.plan.at(threads) if _known(c, period)]
        current = list(levels.fused)
        if set(current) >= set(target) and not self._apart(current, threads):
            return []
        if threads == self._proposed_at and self._periods_since < RETRY_PERIODS:
            return []                      # proposed at this level already: give the run time (or a retry)
        self._proposed_at, self._periods_since = threads, 0
        decisions: list[Decision] = [Unfuse(c, reason=self._unfuse_reason(c, threads))
                                     for c in self._apart(current, threads)]
        decisions += [Fuse(c, reason=self._fuse_reason(c, threads)) for c in target if c not in current]
        return decisions

    def _apart(self, current: list[tuple[str, ...]], threads: int) -> list[tuple[str, ...]]:
        """The fused chains that must come apart at ``threads``: not inside one chain of that level."""
        target = self.plan.at(threads)
        return [c for c in current if not any(set(c) <= set(t) for t in target)]

    def _unfuse_reason(self, chain: tuple[str, ...], threads: int) -> str:
        alone = [n for n in chain if n in self.plan.single_worker]
        if threads > 1 and alone:
            return (f"{threads} threads: {', '.join(alone)} takes one worker at a time, so it runs as a task of "
                    "its own and its neighbours run beside it")
        return f"{threads} thread(s): {' → '.join(chain)} is not fused at this level"

    @staticmethod
    def _fuse_reason(chain: tuple[str, ...], threads: int) -> str:
        if threads <= 1:
            return f"1 thread: {' → '.join(chain)} runs as one task again (one buffer hop for the whole chain)"
        return f"{threads} threads: {' → '.join(chain)} may run on several workers at once: one shared task"


def _known(chain: tuple[str, ...], period: PeriodStats) -> bool:
    """True unless the period names operators and not all of the chain's (another backend's units)."""
    return not period.operators or all(name in period.operators for name in chain)
