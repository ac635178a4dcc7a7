"""Figures registered before the engine can measure them: IBM Figs. 8–9 and Haren's.

Their runners raise :class:`~elastream.bench._figures_core.NotAvailable` with
what is missing, so ``bench/REPORT.md`` lists them under "not yet measured"
with that reason instead of leaving them out or faking a number.
"""

from __future__ import annotations

from elastream.bench._figures_core import Figure, no_plot, no_table, no_verdict, not_available

IBM_REASON = ("not available yet: needs Runner(model=...) with the manual, dedicated and dynamic threading models "
              "and a benchmark of 1,000-operator flows (issue 21 items 1–3)")
HAREN_REASON = ("not available yet: needs Runner(model=...) (the dedicated model is Haren's OS-scheduling "
                "baseline) and Haren's multi-class policies")


def _pending(paper: str, fig: str, title: str, claim: str, reason: str) -> Figure:
    return Figure(paper, fig, title, claim, not_available(reason), no_table, no_verdict, no_plot)


def figures() -> list[Figure]:
    """IBM Figs. 8–9 and Haren Figs. 4, 8, 9."""
    return [
        _pending("ibm", "fig8", "1,000 operators: pure pipeline and pure data parallel",
                 "On a 1,000-operator pipeline dedicated beats dynamic and manual is worst; on a 1,000-wide data-"
                 "parallel graph manual wins at cost 1 and dynamic with a few threads wins at high cost.",
                 IBM_REASON),
        _pending("ibm", "fig9", "1,000 operators: width 10 × depth 100",
                 "On the mixed graph the dynamic model is the best option at every tuple cost; manual is worst.",
                 IBM_REASON),
        _pending("haren", "fig4", "Single-class scheduling policies",
                 "Past light load, Haren's Chain policy gives the best throughput and HR and FCFS the best mean and "
                 "maximum latency, outperforming OS scheduling of one thread per operator.", HAREN_REASON),
        _pending("haren", "fig8", "Multi-class scenario 1 (steady state)",
                 "In steady state Haren gives the HIGH queries much lower mean and maximum latency than OS "
                 "scheduling while the LOW queries' mean latency stays at the OS's level.", HAREN_REASON),
        _pending("haren", "fig9", "Multi-class scenario 2 (dynamic, high load)",
                 "Under fluctuating overload Haren prioritises the HIGH queries (better throughput than OS) while "
                 "the LOW queries do slightly worse.",
                 HAREN_REASON),
    ]
