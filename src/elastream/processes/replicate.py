"""Replicate operators across worker processes: replica counts and placement (C-Stream §4.2).

Role
----
Runs in the parent before any worker process starts. The graph pass itself —
``X`` becomes ``X#split -> X#0 .. X#k-1 -> X#merge`` — is
:func:`elastream.ordered.replicate.replicate_flow`; this module decides how
many replicas (:func:`choose_replicas`, for ``replicas="auto"``) and where the
new operators run (:func:`expand_assignment`), so pure-Python work that holds
the GIL runs on several cores while the output keeps the sequential order.

How a user asks for it
----------------------
One way: ``Runner(replicas={"X": k})``, or ``replicas="auto"`` with
``processes > 1`` (the operators whose measured or declared cost exceeds one
process's share)::

    es.Runner(processes=2, replicas={"sum": 2}).run(flow)

Replica ``r`` of ``X`` goes to process ``(home + r) % processes``, ``home``
being X's own entry in the placement; the split runs with X's upstream
operator and the merge with the split (sharing a link that bounds and
balances the replicas' backlogs). A placement dict may pin
``"X#r"``, ``"X#split"`` and ``"X#merge"`` of the replicas ``replicas=``
asks for (:func:`replicated_placement` writes such a dict); naming them
without ``replicas=`` is refused.

Threading: pure functions of the flow, called from the thread that starts a run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from elastream.errors import FlowValidationError
from elastream.graph.flow import Flow
from elastream.placement.choose import check_complete
from elastream.ordered.replica import replicable_kind
from elastream.ordered.replicate import (SEP, check_ends_linked, check_replicable, max_replicas, merge_name,
                                         parse_replica_name, replica_name, replicate_flow, split_name)

__all__ = ["SEP", "check_ends_linked", "check_replicable", "choose_replicas", "expand_assignment", "max_replicas",
           "merge_name", "parse_replica_name", "replica_name", "replicate_flow", "replicated_placement",
           "split_name"]


def check_pinned(flow: Flow, assignment: Mapping[str, int], counts: Mapping[str, int]) -> None:
    """Raise FlowValidationError when ``assignment`` pins a replica, split or merge that ``counts`` does not ask for.

    Replicas are asked for with ``replicas=`` only; a placement may then say where they go.
    """
    for key in assignment:
        if key in flow.operators:
            continue
        parsed = parse_replica_name(key)
        op, index = parsed if parsed is not None else (key.rpartition(SEP)[0], None)
        if op not in flow.operators or (parsed is None and key not in (split_name(op), merge_name(op))):
            continue
        if op not in counts:
            raise FlowValidationError(
                f"placement names {key!r} but operator {op!r} of flow {flow.name!r} has no replicas: "
                f"pass replicas={{{op!r}: k}} to the Runner (the placement only says where they run)", operator=op)
        if index is not None and index >= counts[op]:
            raise FlowValidationError(
                f"placement names {key!r} but replicas= asks for {counts[op]} replicas of {op!r} "
                f"(numbered 0..{counts[op] - 1})", operator=op)


def expand_assignment(flow: Flow, assignment: Mapping[str, int], processes: int,
                      replicas: Mapping[str, int] | str | None = None,
                      stats: Any = None, window_s: float | None = None,
                      active: Mapping[str, Sequence[int]] | None = None) -> tuple[Flow, dict[str, int]]:
    """The flow to run and its full assignment, with replicated operators rewritten.

    Replica counts come from ``replicas`` (a dict, or "auto" for
    :func:`choose_replicas` with ``stats``); ``assignment`` may pin where
    those replicas (``"X#r"``), splits and merges go, and nothing else of the
    kind (:func:`check_pinned`). Replica ``r`` not pinned goes to process
    ``(home + r) % processes``, ``home`` being X's own entry. The split goes
    with X's upstream operator and the merge with the split unless placed. Without
    replicas, ``flow`` and ``assignment`` come back unchanged. ``window_s``: as for
    :func:`~elastream.ordered.replicate.replicate_flow`; so does ``active`` (the replicas that take
    work from the start, the others held ready).
    """
    counts = choose_replicas(flow, processes, stats) if replicas == "auto" else dict(replicas or {})
    for name, count in counts.items():
        check_replicable(flow, name, count)
    check_pinned(flow, assignment, counts)
    check_complete(assignment, flow, replicated=counts)
    if not counts:
        return flow, dict(assignment)
    full = {name: p for name, p in assignment.items() if name not in counts}
    for name, count in counts.items():
        home = _home(flow, assignment, name)
        for r in range(count):
            full.setdefault(replica_name(name, r), (home + r) % processes)
        full.setdefault(split_name(name), _neighbour(flow, assignment, name, upstream=True, default=home))
        # The merge goes with its split unless placed: then they share a link, which bounds each replica's
        # backlog by its measured work (without it only the ports bound it, in pieces of up to thousands of
        # tuples, and the source runs far ahead) and balances the replicas; an on_end also needs the
        # keys' first-seen order the split keeps.
        full.setdefault(merge_name(name), full[split_name(name)])
    # A split and its merge balance the replicas only when they share a process (they share a link object).
    linked = [name for name in counts if full[split_name(name)] == full[merge_name(name)]]
    local = {name: [r for r in range(count) if full[replica_name(name, r)] == full[split_name(name)]]
             for name, count in counts.items()}
    rewritten = replicate_flow(flow, counts, linked=linked, local=local, window_s=window_s, active=active)
    missing = [n for n in rewritten.operators if n not in full]
    if missing:
        raise ValueError(f"placement assigns no process to {missing}")
    return rewritten, {name: full[name] for name in rewritten.operators}


def _home(flow: Flow, assignment: Mapping[str, int], name: str) -> int:
    if name in assignment:
        return assignment[name]
    first = assignment.get(replica_name(name, 0))
    return first if first is not None else _neighbour(flow, assignment, name, upstream=True, default=0)


def _neighbour(flow: Flow, assignment: Mapping[str, int], name: str, *, upstream: bool, default: int) -> int:
    """The process of X's first upstream (or downstream) operator, else ``default``."""
    for c in flow.connections:
        other = c.src if upstream and c.dst == name else c.dst if not upstream and c.src == name else None
        if other is not None and other in assignment:
            return assignment[other]
    return default


def choose_replicas(flow: Flow, processes: int, stats: Any = None) -> dict[str, int]:
    """The automatic rule: replicate the operators that dominate the cost.

    Cost is the measured CPU time per operator (``stats``: the FlowStats of an
    earlier run) or else the declared per-tuple ``cost_us`` times the rate the
    operator sees (TurboStream's offline weights). A replicable operator whose
    cost exceeds one process's fair share (total / processes) gets
    ``ceil(cost / share)`` replicas, at most ``processes`` and at most its
    maximum degree of parallelism; with one replica it is left alone.

    Example::

        choose_replicas(flow, 2, stats=es.Runner().run(flow).stats)   # {'sum': 2}
    """
    from elastream.placement import PlacementGraph

    graph = PlacementGraph.from_stats(stats) if stats is not None else PlacementGraph.from_flow(flow)
    weights = {name: w for name, w in graph.weights.items() if name in flow.operators}
    total = sum(weights.values())
    if total <= 0 or processes < 2:
        return {}
    share = total / processes
    chosen = {}
    for name, w in weights.items():
        op = flow[name].operator
        if w <= share or replicable_kind(op) is None:
            continue
        count = min(processes, max_replicas(op), math.ceil(w / share))
        if count >= 2:
            chosen[name] = count
    return chosen


def replicated_placement(flow: Flow, processes: int, replicas: Mapping[str, int] | str = "auto",
                         placement: Any = "auto", stats: Any = None) -> dict[str, int]:
    """A placement dict that pins each replica of ``replicas`` to a process, for ``Runner(placement=...)``.

    A helper for plans written out (to edit or print): it does not ask for
    replicas, ``Runner(replicas=...)`` does, with the same counts.
    ``placement`` is the base plan for the original operators (anything
    ``Runner(placement=...)`` accepts). ``replicas`` maps operator names to
    replica counts, or is "auto" (:func:`choose_replicas`, from ``stats`` when
    given). Replica ``r`` of ``X`` goes to process ``(home + r) % processes``
    where ``home`` is X's process in the base plan — where ``replicas=`` alone puts it too.

    Example::

        plan = replicated_placement(flow, 2, {"sum": 2})
        # {'src': 0, 'sum': 0, 'out': 1, 'sum#0': 0, 'sum#1': 1}
        es.Runner(processes=2, placement=plan, replicas={"sum": 2}).run(flow)
    """
    from elastream.placement.choose import resolve_assignment

    base = resolve_assignment(placement, flow, processes)
    counts = choose_replicas(flow, processes, stats) if replicas == "auto" else dict(replicas)  # type: ignore[arg-type]
    for name, count in counts.items():
        check_replicable(flow, name, count)
    plan = dict(base)
    for name, count in counts.items():
        home = base.get(name, 0)
        for r in range(count):
            plan[replica_name(name, r)] = (home + r) % processes
    return plan
