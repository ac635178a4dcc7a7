"""The scheduler's ready set, and the hook that lets a policy index it.

``Scheduler.ready`` holds the READY tasks in the order they became ready (a dict, values unused by
the scheduler). A policy that must not scan that set on every pick offers an index
(``policy.ready_index()``, see :mod:`elastream.policies.ready_index`): the ready set is then a
:class:`ReadySet`, whose every insertion tells the index that a task arrived, with an arrival stamp
(also stored as the task's value in the dict). Deletions stay the dict's own and tell nobody: an
index entry is valid only while ``ready.get(task)`` still equals the stamp it was pushed with, so a
task that was taken, held, parked or re-added leaves a stale entry that the index skips when it
meets it (lazily: O(1) per deletion, whatever the number of tasks).

Without an index (``ibm``, ``random``, the dedicated model, user policies) the ready set stays a
plain dict, so those paths pay nothing for this.

Threading: every write happens with the scheduler's lock held, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class ReadyIndex(Protocol):
    """What a ready set tells a policy's index (lock held)."""

    def attach(self, ready: ReadySet) -> None: ...

    def arrived(self, task: Any, stamp: int) -> None: ...


class ReadySet(dict):
    """A dict of READY tasks whose insertions are reported to ``index`` with an arrival stamp."""

    __slots__ = ("index", "_seq")

    def __init__(self, index: ReadyIndex):
        super().__init__()
        self.index = index
        self._seq = 0
        index.attach(self)

    def __setitem__(self, task: Any, _value: Any = None) -> None:
        seq = self._seq = self._seq + 1
        dict.__setitem__(self, task, seq)
        self.index.arrived(task, seq)

    def update(self, other: Any = (), **kw: Any) -> None:  # type: ignore[override]
        """Insert through :meth:`__setitem__`, so the index hears of every arrival."""
        for task in (other.keys() if hasattr(other, "keys") else other):
            self[task] = None

    def setdefault(self, task: Any, default: Any = None) -> Any:  # type: ignore[override]
        if task not in self:
            self[task] = None
        return self[task]


def new_ready_set(policy: Any) -> dict:
    """The ready set for ``policy``: a :class:`ReadySet` on its index when it offers one, else a plain dict."""
    make_index = getattr(policy, "ready_index", None)
    index = make_index() if make_index is not None else None
    return {} if index is None else ReadySet(index)


def without_index(ready: dict) -> dict:
    """The same READY tasks, in the same order, in a plain dict (for a model that never picks)."""
    return dict.fromkeys(ready)


def reorder(ready: dict, order: Iterable[Any]) -> None:
    """Put the READY tasks in ``order`` (the same tasks); an index sees them arrive again in that order."""
    ready.clear()
    for task in order:
        ready[task] = None
