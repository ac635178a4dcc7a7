"""Haren's view of the operators it schedules: index, graph neighbours, query and priority class.

Built once when a run starts (and again after a reconfiguration replaces tasks, at the next
scheduling task), from the scheduler's tasks and the flow's query tags
(:meth:`elastream.graph.flow.Flow.tag_query`). A *query* is a connected component of the flow
unless its operators are tagged with a query name; an untagged operator takes the query of the
nearest tagged operator upstream of it, else its component's (``"query-<n>"``).

Threading: an :class:`OperatorView` is written by the scheduling task only (its counter baseline by
the one worker whose list holds the operator; :mod:`elastream.policies.haren.scheduling_task`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastream.graph.flow import DEFAULT_PRIORITY, PRIORITY_CLASSES
from elastream.runtime.fusion import member_names

#: Priority classes of the Multi-class policy (Haren §7.4) by rank: a higher rank runs first.
CLASS_RANKS = {name: rank for rank, name in enumerate(PRIORITY_CLASSES)}
DEFAULT_CLASS = DEFAULT_PRIORITY


class OperatorView:
    """One scheduled operator (a task) as Haren's functions ``f`` and ``g`` see it."""

    __slots__ = ("index", "name", "task", "upstream", "downstream", "is_source", "is_sink", "query",
                 "priority_class", "class_rank", "_busy", "_in", "_out", "period_busy_s", "period_in",
                 "period_out")

    def __init__(self, index: int, task: Any, query: str, priority_class: str):
        self.index = index
        self.name: str = task.name
        self.task = task
        self.upstream: tuple[int, ...] = ()
        self.downstream: tuple[int, ...] = ()
        self.is_source: bool = task.is_source
        self.is_sink: bool = not any(task.outputs)
        self.query = query
        self.priority_class = priority_class
        self.class_rank = CLASS_RANKS.get(priority_class, 0)
        self._busy, self._in, self._out = task.busy_s, task.tuples_in, task.tuples_out
        self.period_busy_s = 0.0
        self.period_in = 0
        self.period_out = 0

    def take_period(self) -> None:
        """Read the task's counters: what it did since the last call (its period, as in ``OperatorPeriod``)."""
        task = self.task
        busy, n_in, n_out = task.busy_s, task.tuples_in, task.tuples_out
        self.period_busy_s, self.period_in, self.period_out = busy - self._busy, n_in - self._in, n_out - self._out
        self._busy, self._in, self._out = busy, n_in, n_out

    def __repr__(self) -> str:
        return f"<op {self.index} {self.name} {self.query}/{self.priority_class}>"


def build_views(tasks: Sequence[Any], tags: Mapping[str, tuple[str, str]] | None = None) -> list[OperatorView]:
    """An :class:`OperatorView` per task, with neighbours, queries and classes.

    ``tags`` maps an operator name to its (query, priority class) as tagged on the flow.
    """
    tags = tags or {}
    position = {id(t): i for i, t in enumerate(tasks)}
    queries = _queries(tasks, position, tags)
    views = [OperatorView(i, t, *queries[i]) for i, t in enumerate(tasks)]
    for view, task in zip(views, tasks):
        view.upstream = tuple(dict.fromkeys(position[id(u)] for u in task.upstream if id(u) in position))
        view.downstream = tuple(dict.fromkeys(position[id(d)] for d in task.downstream if id(d) in position))
    return views


def _queries(tasks: Sequence[Any], position: dict[int, int],
             tags: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """(query, class) per task: its tag, else its nearest tagged upstream's, else its component's."""
    found: list[tuple[str, str] | None] = [_tag_of(t, tags) for t in tasks]
    for i in _topological(tasks, position):
        if found[i] is None:
            ups = [found[position[id(u)]] for u in tasks[i].upstream if id(u) in position]
            found[i] = next((q for q in ups if q is not None), None)
    component = _components(tasks, position)
    return [q if q is not None else (f"query-{component[i]}", DEFAULT_CLASS) for i, q in enumerate(found)]


def _tag_of(task: Any, tags: Mapping[str, tuple[str, str]]) -> tuple[str, str] | None:
    """A task's own tag; a fused chain takes its first tagged member's."""
    for name in member_names(task):
        if name in tags:
            return tags[name]
    return None


def _topological(tasks: Sequence[Any], position: dict[int, int]) -> list[int]:
    """Task indices, every task after its publishers (a loop's remainder in index order)."""
    pending = [sum(1 for u in t.upstream if id(u) in position) for t in tasks]
    order = [i for i, n in enumerate(pending) if n == 0]
    k = 0
    while k < len(order):
        for d in tasks[order[k]].downstream:
            j = position.get(id(d))
            if j is not None:
                pending[j] -= 1
                if pending[j] == 0:
                    order.append(j)
        k += 1
    seen = set(order)
    return order + [i for i in range(len(tasks)) if i not in seen]


def _components(tasks: Sequence[Any], position: dict[int, int]) -> list[int]:
    """The connected component (numbered from 0 in task order) of every task."""
    comp = [-1] * len(tasks)
    n = 0
    for root in range(len(tasks)):
        if comp[root] >= 0:
            continue
        comp[root] = n
        stack = [root]
        while stack:
            t = tasks[stack.pop()]
            for peer in (*t.upstream, *t.downstream):
                j = position.get(id(peer))
                if j is not None and comp[j] < 0:
                    comp[j] = n
                    stack.append(j)
        n += 1
    return comp
