"""One per-period statistics snapshot, taken at one point and handed to every reader.

A :class:`PeriodSampler` turns the whole-run snapshot of a running flow
(``handle.stats()``) into one :class:`~elastream.metrics.period.PeriodStats`
per period: the monitor calls :meth:`PeriodSampler.tick` once a period and the
listeners (policies, elasticity controllers, Haren's scheduling task) all get
that same snapshot, so none of them walks live tasks. The sampler costs
nothing until someone listens: without listeners the monitor never calls it.

Threading: ``tick`` runs on the monitor thread; ``latest`` may be read from any thread.
"""

from __future__ import annotations

from collections.abc import Callable

from elastream.metrics.period import PeriodStats, period_between
from elastream.metrics.stats import FlowStats

PeriodListener = Callable[[PeriodStats], None]


class PeriodSampler:
    """Deltas of a run's statistics, one period at a time."""

    def __init__(self, snapshot: Callable[[], FlowStats]):
        self._snapshot = snapshot
        self._before: FlowStats | None = None
        self._listeners: list[PeriodListener] = []
        self.latest: PeriodStats | None = None
        """The last period's snapshot (None before the first period ended)."""

    @property
    def has_listeners(self) -> bool:
        return bool(self._listeners)

    def add_listener(self, listener: PeriodListener) -> None:
        """Call ``listener(period)`` with every period's snapshot from now on."""
        self._listeners.append(listener)

    def take(self) -> PeriodStats:
        """The period since the last take (or since the start), now."""
        after = self._snapshot()
        period = period_between(self._before, after)
        self._before = after
        self.latest = period
        return period

    def tick(self) -> None:
        """Take this period's snapshot and hand it to every listener (the monitor's one call a period)."""
        period = self.take()
        for listener in self._listeners:
            listener(period)
