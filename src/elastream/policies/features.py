"""Derived operator features shared by the ordered-multicore §6 heuristics.

Pure functions of the live task features (:class:`~elastream.policies.base.TaskView`);
called under the scheduler lock, so they stay linear in the number of operators.
"""

from __future__ import annotations

from collections.abc import Iterable


def cumulative_selectivities(tasks: Iterable) -> dict:
    """cs_i = s_i × cs of the upstream (the product since ingress, §6.1 eq. 1).

    On a DAG an operator with several publishers takes their mean, so a
    linear pipeline gets exactly the paper's product.
    """
    memo: dict = {}

    def cs(task) -> float:
        if task in memo:
            return memo[task]
        memo[task] = 1.0  # guards feedback loops through control inputs
        ups = [u for u in task.upstream if u.position < task.position]
        base = sum(cs(u) for u in ups) / len(ups) if ups else 1.0
        memo[task] = base * task.selectivity
        return memo[task]

    for t in tasks:
        cs(t)
    return memo


def all_tasks(ready: Iterable) -> list:
    """Every task of the flow, reached from the ready ones through the graph."""
    seen: dict = {}
    stack = list(ready)
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen[t] = None
        stack.extend(t.upstream)
        stack.extend(t.downstream)
    return list(seen)
