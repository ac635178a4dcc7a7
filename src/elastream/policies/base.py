"""The scheduler plug-in interface (C-Stream §3.2.6; Haren's inter/intra-thread functions).

A policy is consulted by the mechanism at three points:

* ``pick(ready, now)`` — which READY operator a free worker runs next;
* ``quantum(task, default)`` — the time budget of this dispatch, i.e. when the
  operator is preempted at its next wait or push (C-Stream §3.2.4);
* ``on_tick(period)`` — optional periodic hook with the period's statistics snapshot
  (:class:`~elastream.metrics.period.PeriodStats`: what changed over the period).

``pick`` is called with the scheduler lock held, so it must be quick and must
not block; it reads only the features listed in :class:`TaskView`. ``ready`` is
the scheduler's ready set (READY tasks in arrival order); a policy that must not
scan it on every pick derives from
:class:`~elastream.policies.ready_index.IndexedPolicy`, whose index follows the set.
"""

from __future__ import annotations

from collections.abc import Collection
from operator import attrgetter
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from elastream.metrics.period import PeriodStats


class TaskView(Protocol):
    """The operator features a policy may read (all cheap, read without locks)."""

    name: str
    index: int
    is_source: bool
    last_scheduled: float
    read_rate: float
    write_rate: float
    busy_s: float
    tuples_in: int
    tuples_out: int

    position: int  # longest path from a source (pipeline order)
    workers: int  # workers running it now
    max_workers: int  # most workers it may have at once (ordered-multicore §6)
    upstream: list
    downstream: list

    @property
    def queued(self) -> int: ...  # tuples waiting in the input buffers

    @property
    def cost_per_tuple(self) -> float: ...  # measured worker seconds per input tuple

    @property
    def selectivity(self) -> float: ...  # measured outputs per input tuple

    def output_queued(self) -> int: ...  # tuples waiting in the buffers it feeds

    def front_times(self) -> tuple[float, float] | None: ...  # (enqueue, origin) of the oldest tuple

    def free_downstream(self) -> int: ...  # least free space downstream, -1 for sinks


class SchedulingPolicy(Protocol):
    """What every scheduling policy implements."""

    name: ClassVar[str]

    def pick(self, ready: Collection[TaskView], now: float) -> TaskView: ...

    def quantum(self, task: TaskView, default: float) -> float: ...

    def on_tick(self, stats: PeriodStats) -> None: ...


class BasePolicy:
    """Defaults for the optional parts: the runner's quantum, no periodic hook.

    Subclasses set ``name`` and implement ``pick``. ``seed`` makes every random
    choice reproducible.
    """

    name: ClassVar[str] = "base"
    #: Set True to receive ``on_tick`` snapshots from the monitor.
    wants_ticks: ClassVar[bool] = False

    def __init__(self, seed: int | None = None):
        import random

        self.rng = random.Random(seed)

    def pick(self, ready: Collection[TaskView], now: float) -> TaskView:
        raise NotImplementedError

    def quantum(self, task: TaskView, default: float) -> float:
        return default

    def on_tick(self, stats: PeriodStats) -> None:
        return None

    #: A ready operator not run for this long is picked first (aging): strict
    #: priority heuristics would otherwise starve an independent branch.
    starvation_s: ClassVar[float] = 0.25

    def starving(self, ready: Collection[TaskView], now: float) -> TaskView | None:
        """The least recently run ready operator if it has waited past ``starvation_s``."""
        oldest = min(ready, key=last_scheduled_key)
        return oldest if now - oldest.last_scheduled > self.starvation_s else None

    def _tie_break(self, best: list[TaskView]) -> TaskView:
        return best[0] if len(best) == 1 else self.rng.choice(best)

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


#: The key ordering operators by when they were last run (read in C: no Python call per operator).
last_scheduled_key = attrgetter("last_scheduled")
