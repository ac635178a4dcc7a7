"""Figures registered before the engine can measure them: Haren's.

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
    """Haren Figs. 4, 8, 9."""
    return [
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
