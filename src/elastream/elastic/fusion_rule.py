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
thread and at several, and which members take one worker at a time). In a run
over several processes each process has its own plan, of the part of the flow it
runs, and its own thread level; the run hands a decision to the process that runs
the chain (the control channel). A run whose units start bypassed (``Runner()``,
``Runner(processes=P)``: :mod:`elastream.runtime.bypass`) keeps its chains as built.

Threading: one instance per elastic loop, called from its thread.

Example::

    rule = FusionRule(FusionPlan(one_thread=(("a", "slow", "b", "c"),), several_threads=(("b", "c"),),
                                 single_worker=frozenset({"slow"})))
    rule.decide(period, Levels(threads=(2,), fused=(("a", "slow", "b", "c"),)), None)
    # [Unfuse(("a", "slow", "b", "c"), reason="2 threads: slow takes one worker at a time ..."),
    #  Fuse(("b", "c"), reason="2 threads: b → c may run on several workers at once: one shared task")]
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """What a flow (or one process's part of it) fuses at one thread and at several (``find_chains``),
    made once before the run."""

    one_thread: tuple[tuple[str, ...], ...] = ()
    several_threads: tuple[tuple[str, ...], ...] = ()
    single_worker: frozenset[str] = field(default_factory=frozenset)
    """Fusable operators that take one worker at a time (they run alone on several threads)."""
    operators: frozenset[str] | None = None
    """The fusable operators the plan covers (None: every chain the run reports is this plan's)."""

    @classmethod
    def of(cls, flow: Flow, fuse: bool = True) -> FusionPlan:
        """The plan of ``flow`` (reads its operators' specs; runs nothing); empty with fusion off."""
        if not fuse:
            return cls(operators=frozenset())
        ops = {name: handle.operator for name, handle in flow.operators.items()}
        specs = {name: op.spec() for name, op in ops.items()}
        fusable_ops = frozenset(n for n, op in ops.items() if fusable(op, specs[n]))
        single = frozenset(n for n in fusable_ops if specs[n].max_workers <= 1)
        return cls(tuple(find_chains(flow, specs, ops, 1)), tuple(find_chains(flow, specs, ops, 2)), single,
                   fusable_ops)

    def at(self, threads: int) -> tuple[tuple[str, ...], ...]:
        """The chains fused at ``threads`` worker threads."""
        return self.one_thread if threads <= 1 else self.several_threads

    def covers(self, chain: tuple[str, ...]) -> bool:
        """True when ``chain`` runs in the part this plan is of."""
        return self.operators is None or set(chain) <= self.operators


class FusionRule:
    """Proposes the fusion of the thread level in force in each process, after that process's level changes.

    ``plans``: one plan for a one-process run, or one per process (process ``p``'s part of the flow); a
    decision names only its chain, and the run hands it to the process that runs that chain.
    """

    name = "fusion"

    def __init__(self, plans: FusionPlan | Sequence[FusionPlan]):
        self.plans = (plans,) if isinstance(plans, FusionPlan) else tuple(plans)
        self._proposed_at: dict[int, int] = {}   # per process: the thread level of the last proposal
        self._periods_since: dict[int, int] = {}

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None = None) -> list[Decision]:
        """Unfuse and Fuse decisions turning ``levels.fused`` into each plan's chains at its process's level."""
        if levels.chains_as_built or not levels.threads:
            return []                      # parts hosting units' bypasses stay as built
        decisions: list[Decision] = []
        for process, plan in enumerate(self.plans[:levels.processes]):
            self._periods_since[process] = self._periods_since.get(process, RETRY_PERIODS) + 1
            decisions += self._decide_part(process, plan, period, levels)
        return decisions

    def _decide_part(self, process: int, plan: FusionPlan, period: PeriodStats, levels: Levels) -> list[Decision]:
        threads = levels.threads[process]
        target = [c for c in plan.at(threads) if _known(c, period)]
        current = [c for c in levels.fused if plan.covers(c)]
        apart = self._apart(plan, current, threads)
        if set(current) >= set(target) and not apart:
            return []
        if threads == self._proposed_at.get(process) and self._periods_since[process] < RETRY_PERIODS:
            return []                      # proposed at this level already: give the run time (or a retry)
        self._proposed_at[process], self._periods_since[process] = threads, 0
        decisions: list[Decision] = [Unfuse(c, reason=self._unfuse_reason(plan, c, threads)) for c in apart]
        decisions += [Fuse(c, reason=self._fuse_reason(c, threads)) for c in target if c not in current]
        return decisions

    @staticmethod
    def _apart(plan: FusionPlan, current: list[tuple[str, ...]], threads: int) -> list[tuple[str, ...]]:
        """The fused chains that must come apart at ``threads``: not inside one chain of that level."""
        target = plan.at(threads)
        return [c for c in current if not any(set(c) <= set(t) for t in target)]

    @staticmethod
    def _unfuse_reason(plan: FusionPlan, chain: tuple[str, ...], threads: int) -> str:
        alone = [n for n in chain if n in plan.single_worker]
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
