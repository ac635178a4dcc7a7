"""Figures registered before the engine can measure them: IBM Figs. 8–9 and Haren's.

Their runners raise :class:`~elastream.bench._figures_core.NotAvailable` with
what is missing, so ``bench/REPORT.md`` lists them under "not yet measured"
with that reason instead of leaving them out or faking a number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import elastream as es
from elastream.bench._figures_core import Figure, NotAvailable, no_plot, no_table, no_verdict

#: Haren's scheduling policies (its Table 4), none of which is registered yet.
HAREN_POLICIES = ("fcfs", "hr", "chain")


def models_available() -> bool:
    """Whether ``Runner(model=...)`` takes the manual and dedicated threading models."""
    try:
        es.Runner(model="manual")
        es.Runner(model="dedicated")
    except (TypeError, ValueError):
        return False
    return True


def ibm_reason() -> str:
    """What IBM Figs. 8–9 still need, as the engine stands when the suite runs."""
    if not models_available():
        return ("not available yet: needs Runner(model=...) with the manual, dedicated and dynamic threading models "
                "and a benchmark of 1,000-operator flows (issue 21 items 1–3)")
    return ("not available yet: needs Runner(model=...) measured on the paper's 1,000-operator graphs; the models "
            "exist, but this suite has no runner for those graphs yet (a benchmark of them is issue 21 item 3's)")


def haren_reason() -> str:
    """What Haren's figures still need."""
    missing = [p for p in HAREN_POLICIES if p not in es.policies.available()]
    policies = f"Haren's policies ({', '.join(missing)} and the multi-class policy)"
    if not models_available():
        return f"not available yet: needs Runner(model=...) (dedicated: Haren's OS-scheduling baseline) and {policies}"
    return (f"not available yet: needs {policies}; Runner(model='dedicated'), Haren's OS-scheduling baseline, "
            f"exists" if missing else "not available yet: needs Haren's multi-class policy and a benchmark of it")


def _raises(reason: Callable[[], str]) -> Callable[[bool], dict[str, Any]]:
    def run(quick: bool) -> dict[str, Any]:
        raise NotAvailable(reason())
    return run


def _pending(paper: str, fig: str, title: str, claim: str, reason: Callable[[], str]) -> Figure:
    return Figure(paper, fig, title, claim, _raises(reason), no_table, no_verdict, no_plot)


def figures() -> list[Figure]:
    """IBM Figs. 8–9 and Haren Figs. 4, 8, 9."""
    return [
        _pending("ibm", "fig8", "1,000 operators: pure pipeline and pure data parallel",
                 "On a 1,000-operator pipeline dedicated beats dynamic and manual is worst; on a 1,000-wide data-"
                 "parallel graph manual wins at cost 1 and dynamic with a few threads wins at high cost.",
                 ibm_reason),
        _pending("ibm", "fig9", "1,000 operators: width 10 × depth 100",
                 "On the mixed graph the dynamic model is the best option at every tuple cost; manual is worst.",
                 ibm_reason),
        _pending("haren", "fig4", "Single-class scheduling policies",
                 "Past light load, Haren's Chain policy gives the best throughput and HR and FCFS the best mean and "
                 "maximum latency, outperforming OS scheduling of one thread per operator.", haren_reason),
        _pending("haren", "fig8", "Multi-class scenario 1 (steady state)",
                 "In steady state Haren gives the HIGH queries much lower mean and maximum latency than OS "
                 "scheduling while the LOW queries' mean latency stays at the OS's level.", haren_reason),
        _pending("haren", "fig9", "Multi-class scenario 2 (dynamic, high load)",
                 "Under fluctuating overload Haren prioritises the HIGH queries (better throughput than OS) while "
                 "the LOW queries do slightly worse.",
                 haren_reason),
    ]
