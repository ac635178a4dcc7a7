"""MaxRunningTimeScheduling (C-Stream §3.2.6): the operator that can run the
longest without blocking, estimated as the minimum of how long it can read
(queued tuples / read rate) and how long it can write (free downstream space /
write rate). Rates come from the monitor's recent samples."""

from __future__ import annotations

from elastream.policies.base import BasePolicy
from elastream.policies.registry import register

_UNKNOWN_RATE = 1e-9  # no sample yet: assume slow, so the estimate is long


@register("max_running_time")
class MaxRunningTimePolicy(BasePolicy):
    """Longest estimated uninterrupted run wins; ties at random."""

    def pick(self, ready, now):
        best, longest = [], -1.0
        for t in ready:
            est = running_time_estimate(t)
            if est > longest:
                best, longest = [t], est
            elif est == longest:
                best.append(t)
        return self._tie_break(best)


def running_time_estimate(task) -> float:
    """Seconds ``task`` could run before its inputs empty or its outputs fill."""
    read_s = float("inf") if task.is_source else task.queued / max(task.read_rate, _UNKNOWN_RATE)
    free = task.free_downstream()
    write_s = float("inf") if free < 0 else free / max(task.write_rate, _UNKNOWN_RATE)
    est = min(read_s, write_s)
    return est if est != float("inf") else 1e18
