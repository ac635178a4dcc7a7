"""Haren's scheduling task T_S (§6, Algorithms 2 and 3), run by every worker once a period P.

1. *Update* (in parallel): each worker recomputes the independent features of the operators it ran
   (its set E) and marks in U those operators and every operator D says their runs may change.
2. *Coordinate* (:class:`~elastream.policies.haren.barrier.PhaseBarrier`): the last worker to
   arrive, ``t*``, recomputes the dependent features of the operators marked in U (and clears the
   marks), then assigns every live operator to a worker with ``f`` and publishes the new lists all at
   once; the others wait until it is done.
3. *Priority* (in parallel): each worker computes ``g`` for the operators of its new list.
4. *Sort* (in parallel): each worker sorts its list by the vectors, the highest first.

The worker runs this with the scheduler's lock released and no operator in hand, so no operator
runs on a worker that takes part while the lists change; the lists are swapped under the
scheduler's lock, so a worker picking meanwhile (one that has not joined yet) sees either the old
lists or the new ones, and an operator is on exactly one list at every moment.

A policy whose ``f`` or ``g`` raises fails the run, naming the policy and the function
(:mod:`elastream.policies.failures`); the scheduling task then carries on with a round-robin
assignment and equal priorities so that the flow drains and stops.

Threading: called by worker threads only, without the scheduler's lock (it takes it to publish).
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

from elastream.policies.failures import policy_failure
from elastream.policies.haren.spec import as_vector
from elastream.runtime.states import OperatorState

if TYPE_CHECKING:  # pragma: no cover
    from elastream.policies.haren.state import HarenState, WorkerSlot

_DONE = OperatorState.COMPLETED
#: The priority every operator gets when ``g`` failed (the flow drains in list order).
_EQUAL = (0,)


def scheduling_task(policy: Any, state: HarenState, slot: WorkerSlot, sched: Any) -> None:
    """Run T_S on the calling worker (lock not held); its new list is in ``slot`` when it returns."""
    t0 = perf_counter()
    update_executed(state, slot, sched.now())
    t1 = perf_counter()
    state.barrier.cross(slot.key, lambda: sequential_part(policy, state, slot, sched),
                        give_up=sched.finished.is_set)
    t2 = perf_counter()
    order = list(state.lists.get(slot.key, ()))
    prios = priorities(policy, state, order, sched)
    t3 = perf_counter()
    slot.order, slot.prios = rank(order, prios)
    slot.cursor, slot.last_prio = 0, None
    t4 = perf_counter()
    spent = slot.spent
    spent["update"] += t1 - t0
    spent["coord"] += t2 - t1
    spent["priority"] += t3 - t2
    spent["sort"] += t4 - t3
    slot.scheduling_tasks += 1


def rank(order: list, prios: list[tuple]) -> tuple[list, list[tuple]]:
    """``order`` and its vectors sorted by vector, the highest first, lexicographically (§6 "Sorting");
    equal vectors keep their order.

    Example: vectors (1, 5), (2, 0), (1, 7) rank (2, 0), (1, 7), (1, 5).
    """
    ranked = sorted(zip(prios, range(len(order))), key=_vector_of, reverse=True)
    return [order[i] for _, i in ranked], [p for p, _ in ranked]


def _vector_of(entry: tuple[tuple, int]) -> tuple:
    return entry[0]


def update_executed(state: HarenState, slot: WorkerSlot, now: float) -> None:
    """Algorithm 2, lines 1-5: independent features of the operators in E, and their marks in U."""
    views, table, depends, marks = state.views, state.table, state.depends, state.update_marks
    independent = table.independent
    for i in slot.executed:
        if i >= len(views):
            continue  # ran before a reconfiguration rebuilt the views
        view = views[i]
        view.take_period()
        table.update(view, independent, now)
        marks[i] = 1
        for k in depends[i]:
            marks[k] = 1
    slot.executed.clear()


def sequential_part(policy: Any, state: HarenState, slot: WorkerSlot, sched: Any) -> None:
    """Algorithm 3, lines 3-10 (``t*`` only): dependent features of the operators in U, then ``f``."""
    s0 = perf_counter()
    now = sched.now()
    if state.tasks_changed(sched.tasks):
        state.rebuild(list(sched.tasks), now)  # a reconfiguration replaced operators (§6: resized here)
    update_dependent(state, now)
    s1 = perf_counter()
    lists = assign(policy, state, sched)
    with sched.lock:
        state.lists = lists
        state.owner = {view.index: key for key, views in lists.items() for view in views}
    state.table.memo.clear()
    s2 = perf_counter()
    slot.spent["seq_update"] += s1 - s0
    slot.spent["seq_assign"] += s2 - s1


def update_dependent(state: HarenState, now: float) -> None:
    """Recompute the dependent features of exactly the operators marked in U, and clear the marks."""
    dependent = state.table.dependent
    marks = state.update_marks
    if not dependent:
        marks[:] = bytes(len(marks))
        return
    views, table = state.views, state.table
    for i in range(len(marks)):
        if marks[i]:
            table.update(views[i], dependent, now)
            marks[i] = 0


def assign(policy: Any, state: HarenState, sched: Any) -> dict[Any, list]:
    """Every live operator on one member's list, by ``f`` (round-robin once ``f`` has failed)."""
    members = sorted(state.barrier.members, key=repr)
    lists: dict[Any, list] = {key: [] for key in members}
    if not members:
        return lists
    f, table, rng, n = state.spec.f, state.table, state.rng, len(members)
    for view in state.views:
        if view.task.state is _DONE:
            continue
        k = view.index % n
        if policy.failed is None:
            try:
                k = int(f(view, table, n, rng)) % n
            except Exception as exc:  # noqa: BLE001 - a broken policy stops the flow, named
                policy.fail(sched, "f", exc)
        lists[members[k]].append(view)
    return lists


def priorities(policy: Any, state: HarenState, order: list, sched: Any) -> list[tuple]:
    """``g`` of every operator in ``order`` (equal vectors once ``g`` has failed)."""
    if policy.failed is not None:
        return [_EQUAL] * len(order)
    g, table = state.spec.g, state.table
    try:
        return [as_vector(g(view, table)) for view in order]
    except Exception as exc:  # noqa: BLE001 - a broken policy stops the flow, named
        policy.fail(sched, "g", exc)
        return [_EQUAL] * len(order)


def record_failure(policy: Any, sched: Any, hook: str, error: BaseException) -> None:
    """Stop the flow: the run raises a PolicyError naming ``policy`` and ``hook`` (lock not held)."""
    sched.internal_error(*policy_failure(policy, hook, error), None)
