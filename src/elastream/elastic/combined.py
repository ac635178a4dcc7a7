"""One controller that sizes threads and replicas together: a thread controller beside DS2.

``create_controller("auto")`` builds it: the trend (or utilisation) controller
sets the thread level of every process, :class:`~elastream.elastic.ds2.DS2Controller`
sizes replicas and names hot key groups. Each sees the same period; the trend
controller untrusts its records whenever the replicas change, so the two do
not read each other's changes as a change of load. Given the flow's
:class:`~elastream.elastic.fusion_rule.FusionPlan` (``fusion=``), the fusion
rule follows the thread level with the fusion compilation would choose there.

Threading: one instance per elastic loop, called from its thread.

Example::

    controller = create_controller("auto", threads="utilization", thread_options={"high": 0.90, "low": 0.80})
    controller.decide(period, levels, machine)      # SetThreads and SetReplicas, each with its reason
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elastream.elastic.controller import Machine
from elastream.elastic.ds2 import DS2Controller
from elastream.elastic.fusion_rule import FusionPlan, FusionRule
from elastream.elastic.trend import TrendController
from elastream.elastic.utilization import UtilizationController
from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels, SetProcesses

THREAD_CONTROLLERS = {"trend": TrendController, "utilization": UtilizationController}


class CombinedController:
    """A thread-level controller and the DS2 replica controller, decided over one period."""

    name = "auto"

    def __init__(self, threads: str = "trend", fusion: FusionPlan | Sequence[FusionPlan] | None = None,
                 thread_options: dict[str, Any] | None = None, **ds2_options: Any):
        if threads not in THREAD_CONTROLLERS:
            raise ValueError(f"unknown thread controller {threads!r}; choose one of {', '.join(THREAD_CONTROLLERS)}")
        #: ``thread_options`` tune the thread controller (``{"high": 0.90}``: C-Stream's U_h).
        self.threads = THREAD_CONTROLLERS[threads](**(thread_options or {}))
        self.replicas = DS2Controller(**ds2_options)
        #: Fuses as compilation would at the thread level in force (given the flow's plan: FusionPlan.of).
        self.fusion = FusionRule(fusion) if fusion is not None else None

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None) -> list[Decision]:
        """The thread controller's decisions, then DS2's (one SetProcesses at most), then the fusion rule's."""
        decisions = self.threads.decide(period, levels, machine) + self.replicas.decide(period, levels, machine)
        if self.fusion is not None:
            decisions += self.fusion.decide(period, levels, machine)
        processes = [d for d in decisions if isinstance(d, SetProcesses)]
        return [d for d in decisions if not isinstance(d, SetProcesses)] + processes[:1]
