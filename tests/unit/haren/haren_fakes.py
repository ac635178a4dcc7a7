"""Stand-ins for the engine's tasks, so Haren's functions run on a fixed feature snapshot.

A :class:`FakeTask` has what Haren reads of a task (name, graph neighbours, counters, the head of
its input); :func:`chain_of` links some into a pipeline; :func:`table_of` builds a feature table with
chosen values.
"""

from __future__ import annotations

from typing import Any

from elastream.policies.haren.features import FeatureTable, feature
from elastream.policies.haren.operators import build_views
from elastream.runtime.states import OperatorState


class FakeTask:
    """What Haren reads of a task."""

    implicit_waits = True

    def __init__(self, name: str, *, source: bool = False, head: float | None = None):
        self.name = name
        self.op = object()  # no fused chain: runs one operator
        self.is_source = source
        self.outputs: list[list[Any]] = [[]]
        self.upstream: list[FakeTask] = []
        self.downstream: list[FakeTask] = []
        self.busy_s = 0.0
        self.tuples_in = 0
        self.tuples_out = 0
        self.last_scheduled = 0.0
        self.head = head
        self.state = OperatorState.READY

    def front_times(self) -> tuple[float, float] | None:
        return None if self.head is None else (self.head, self.head)

    def __repr__(self) -> str:
        return f"<fake {self.name}>"


def chain_of(*names: str) -> list[FakeTask]:
    """A pipeline: the first is a source, each feeds the next."""
    tasks = [FakeTask(n, source=(i == 0)) for i, n in enumerate(names)]
    for a, b in zip(tasks, tasks[1:]):
        a.downstream.append(b)
        a.outputs = [[object()]]
        b.upstream.append(a)
    return tasks


def table_of(tasks: list[FakeTask], values: dict[str, list[float]], tags: dict | None = None):
    """(views, table) over ``tasks`` with ``values[feature][i]`` as feature values."""
    views = build_views(tasks, tags)
    table = FeatureTable([feature(name) for name in values], views)
    for name, column in values.items():
        table.columns[name][:] = column
    return views, table
