"""Haren's shared and per-worker state (Tables 2 and 3) and the scheduling task's overhead counters.

Shared (:class:`HarenState`): the operators O, the feature matrix F, the dependency rows D, the update
array U, the last-run times LU, every worker's list A (as published by ``t*``) and the barrier.
Per worker (:class:`WorkerSlot`): its sorted list and priority vectors, the executed set E, the
start of its execution task t_Y, its back-off and its share of the overhead.

Threading: a worker reads and writes its own slot; LU and E are written by the worker that ran the
operator, under the scheduler's lock; U is written by several workers during the parallel step of
the scheduling task (a byte store is atomic under the GIL) and read by ``t*`` after the barrier;
the lists are replaced by ``t*`` under the scheduler's lock, all at once.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.policies.haren.barrier import PhaseBarrier
from elastream.policies.haren.features import FeatureTable, dependency_map
from elastream.policies.haren.operators import OperatorView, build_views
from elastream.policies.haren.spec import HarenSpec

#: The parts of the scheduling task whose time is counted (Figs. 5-6): g, sorting, the independent
#: update and marking, the whole coordination (both barriers and the sequential part), and within
#: the sequential part the dependent update and the assignment by f.
PHASES = ("priority", "sort", "update", "coord", "seq_update", "seq_assign")


@dataclass(frozen=True, slots=True)
class HarenStats:
    """Where Haren's workers spent their time: each phase of the scheduling task, in seconds, summed
    over the workers, against the workers' whole time (``worker_s``)."""

    policy: str
    workers: int
    scheduling_tasks: int
    worker_s: float
    priority_s: float
    sort_s: float
    update_s: float
    coord_s: float
    seq_update_s: float
    seq_assign_s: float
    delayed_runs: int

    @property
    def total_s(self) -> float:
        """Time in the scheduling task (priority + sort + update + coordination)."""
        return self.priority_s + self.sort_s + self.update_s + self.coord_s

    def fraction(self, phase: str) -> float:
        """``phase`` ("priority", "sort", "update", "coord", "seq_update", "seq_assign" or "total") as a
        fraction of worker time."""
        value = self.total_s if phase == "total" else getattr(self, f"{phase}_s")
        return value / self.worker_s if self.worker_s > 0 else 0.0


class WorkerSlot:
    """One worker's part of Haren (Table 2's thread-local variables)."""

    def __init__(self, key: Hashable, now: float, period_s: float, first_backoff_s: float):
        self.key = key
        self.order: list[OperatorView] = []
        self.prios: list[tuple] = []
        self.cursor = 0
        self.last_prio: tuple | None = None
        self.executed: set[int] = set()
        self.due: list[OperatorView] = []
        #: The start of its execution task; set one period back so the first call runs a scheduling task.
        self.t_y = now - period_s
        self.first_backoff_s = first_backoff_s
        self.backoff_s = first_backoff_s
        self.started = now
        self.ended: float | None = None
        self.spent = dict.fromkeys(PHASES, 0.0)
        self.scheduling_tasks = 0
        self.delayed_runs = 0


class HarenState:
    """Everything the workers of one run share (Table 3's shared variables)."""

    def __init__(self, spec: HarenSpec, tasks: Sequence[Any], tags: Mapping[str, tuple[str, str]] | None,
                 members: set[Hashable], now: float, seed: int | None):
        self.spec = spec
        self.features = spec.resolved_features()
        self.tags = dict(tags or {})
        self.rng = random.Random(seed)
        self.barrier = PhaseBarrier(members)
        self.slots: dict[Hashable, WorkerSlot] = {}
        self.lists: dict[Hashable, list[OperatorView]] = {}
        self.owner: dict[int, Hashable] = {}
        self.rebuild(tasks, now)

    def rebuild(self, tasks: Sequence[Any], now: float) -> None:
        """(Re)build O, F, D, U and LU over ``tasks`` (at the start, and after a reconfiguration, §6)."""
        self.task_ids = [id(t) for t in tasks]
        self.views = build_views(tasks, self.tags)
        self.table = FeatureTable(self.features, self.views)
        self.depends = dependency_map(self.views, self.features)
        self.update_marks = bytearray(b"\x01" * len(self.views))  # every dependent feature is due once
        self.last_run = [now] * len(self.views)
        for view in self.views:
            self.table.update(view, self.table.constant, now)
        self.lists = {}
        self.owner = {}

    def tasks_changed(self, tasks: Sequence[Any]) -> bool:
        """True when the scheduler's tasks are no longer the ones the views were built on."""
        ids = self.task_ids
        return len(ids) != len(tasks) or any(id(t) != i for t, i in zip(tasks, ids))

    def slot(self, key: Hashable, now: float, first_backoff_s: float) -> WorkerSlot:
        """The worker ``key``'s slot (made, and joined to the barrier, on its first call)."""
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = WorkerSlot(key, now, self.spec.period_s, first_backoff_s)
            self.barrier.join(key)
        return slot

    def statistics(self, now: float) -> HarenStats:
        """The overhead counters so far, summed over every worker that took part."""
        slots = list(self.slots.values())
        spent = {p: sum(s.spent[p] for s in slots) for p in PHASES}
        worker_s = sum((s.ended if s.ended is not None else now) - s.started for s in slots)
        return HarenStats(policy=f"haren:{self.spec.name}", workers=len(slots),
                          scheduling_tasks=sum(s.scheduling_tasks for s in slots), worker_s=worker_s,
                          priority_s=spent["priority"], sort_s=spent["sort"], update_s=spent["update"],
                          coord_s=spent["coord"], seq_update_s=spent["seq_update"],
                          seq_assign_s=spent["seq_assign"], delayed_runs=sum(s.delayed_runs for s in slots))
