"""Replicate operators across worker processes: flow rewriting and replica placement (C-Stream §4.2).

Role
----
Runs in the parent before any worker process starts. A stateless or
partitioned function operator ``X`` asked to have ``k`` replicas becomes
``X#split -> X#0 .. X#k-1 -> X#merge`` (see :mod:`elastream.ordered.split_merge`),
and each replica is placed on its own process, so pure-Python work that holds
the GIL runs on several cores while the output keeps the sequential order.

How a user asks for it
----------------------
Replicas are *placement* entries, so this composes with ``Runner(placement=...)``
(TurboStream places "one task per operator or replica"): a placement dict
that names ``"X#0"``, ``"X#1"``, … replicates ``X`` with one replica per
name, on the named processes. :func:`replicated_placement` builds such a
dict from any base placement, either for explicit counts or by the automatic
rule of :func:`choose_replicas`::

    placement = replicated_placement(flow, processes=2, replicas={"sum": 2})
    es.Runner(processes=2, placement=placement).run(flow)

    # automatic: the operator that dominates the measured cost gets one replica per process
    first = es.Runner().run(flow)
    placement = replicated_placement(flow, processes=2, stats=first.stats)

Optional entries ``"X#split"`` / ``"X#merge"`` place the split and the merge;
by default the split runs with X's upstream operator and the merge with its
downstream one, so no extra stream crosses processes. With one process
(``processes=1``) placement is not used; call :func:`replicate_flow` to run
the rewritten flow in one process (useful for tests and for elasticity).

Threading: pure functions of the flow, called from the thread that starts a run.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from elastream.errors import FlowValidationError
from elastream.graph.flow import Flow
from elastream.operators.base import PARTITIONED, max_parallelism
from elastream.ordered.rebalance import SplitMergeLink, supports_moves
from elastream.ordered.split_merge import (DEFAULT_REORDER_CAPACITY, OrderedMerge, OrderedReplica,
                                           OrderedSplit, replicable_kind)

SEP = "#"
_REPLICA = re.compile(r"^(?P<op>.+)#(?P<index>\d+)$")


def replica_name(op: str, index: int) -> str:
    """Name of replica ``index`` of operator ``op``: ``replica_name("sum", 1) == "sum#1"``."""
    return f"{op}{SEP}{index}"


def split_name(op: str) -> str:
    """Name of the split in front of ``op``'s replicas."""
    return f"{op}{SEP}split"


def merge_name(op: str) -> str:
    """Name of the ordered merge behind ``op``'s replicas."""
    return f"{op}{SEP}merge"


def parse_replica_name(name: str) -> tuple[str, int] | None:
    """``("sum", 1)`` for ``"sum#1"``; None for any other name."""
    m = _REPLICA.match(name)
    return (m.group("op"), int(m.group("index"))) if m else None


def max_replicas(op: Any) -> int:
    """Most replicas ``op`` may have: its kind's maximum degree of parallelism (ordered-multicore §6).

    Unbounded for stateless operators, the partition count for partitioned ones.
    """
    return max_parallelism(op.kind, getattr(op, "partitions", 1))


def check_replicable(flow: Flow, name: str, count: int) -> None:
    """Raise FlowValidationError unless operator ``name`` of ``flow`` may have ``count`` replicas."""
    if name not in flow.operators:
        raise FlowValidationError(f"replicas name operator {name!r}, which is not in flow {flow.name!r}",
                                  operator=name)
    op = flow[name].operator
    kind = replicable_kind(op)
    if kind is None:
        raise FlowValidationError(
            f"operator {name!r} ({type(op).__name__}, kind {op.kind!r}) cannot be replicated: only one-input, "
            f"one-output stateless or partitioned function operators can", operator=name)
    if count < 1:
        raise FlowValidationError(f"operator {name!r}: replica count must be >= 1, got {count}", operator=name)
    if count > max_replicas(op):
        hint = " (declare more with key_by(key, partitions=p))" if kind == PARTITIONED else ""
        raise FlowValidationError(f"operator {name!r} allows at most {max_replicas(op)} parallel instances"
                                  f"{hint}; {count} replicas asked", operator=name)
    if getattr(op, "on_end", None) is not None and not hasattr(op, "end_by_key"):
        raise FlowValidationError(
            f"operator {name!r} has an on_end hook but cannot report its ends per key (end_by_key): its "
            f"end-of-stream outputs follow the keys' first-seen order, which its replicas cannot reproduce; "
            f"run it unreplicated", operator=name)


def check_ends_linked(name: str, op: Any, link: SplitMergeLink | None) -> None:
    """Raise FlowValidationError when ``op`` has an ``on_end`` hook but its split and merge share no link.

    The merge orders the replicas' end-of-stream outputs by the keys' first-seen order, which only the
    split knows; they share it through the link, that is, in one process.
    """
    if getattr(op, "on_end", None) is not None and link is None:
        raise FlowValidationError(
            f"operator {name!r} has an on_end hook: its replicas' end-of-stream outputs are put in the keys' "
            f"first-seen order, which only its split knows; place {split_name(name)!r} and {merge_name(name)!r} "
            f"in one process", operator=name)


def replicate_flow(flow: Flow, replicas: Mapping[str, int], *, chunk: int | None = None,
                   reorder: str = "nonblocking", reorder_capacity: int = DEFAULT_REORDER_CAPACITY,
                   linked: Collection[str] | None = None,
                   local: Mapping[str, Collection[int]] | None = None, window_s: float | None = None) -> Flow:
    """A new flow where each operator named in ``replicas`` runs as split → replicas → ordered merge.

    The original flow is left untouched; every replica gets its own deep copy
    of the operator. Connections into ``X`` enter ``X#split``, connections out
    of ``X`` leave ``X#merge``. ``chunk`` fixes the split's batch size (default:
    about :data:`~elastream.ordered.split_merge.PIECE_S` of replica work per piece once measured, else
    :data:`~elastream.ordered.split_merge.DEFAULT_CHUNK`). The split and merge of the operators in
    ``linked`` (default: all) share a :class:`~elastream.ordered.rebalance.SplitMergeLink`
    — only valid when they will run in the same process — which bounds
    backlogs and balances the replicas (moving partitions with their state);
    ``local`` names, per operator, the replicas placed in the split's process
    (the link gives them a shorter backlog: the split refills them at once); ``window_s`` is the
    work a remote replica may have in hand (see :class:`~elastream.ordered.rebalance.SplitMergeLink`).

    Example::

        rewritten = replicate_flow(flow, {"sum": 2})
        sorted(rewritten.operators)   # [..., 'sum#0', 'sum#1', 'sum#merge', 'sum#split', ...]
    """
    for name, count in replicas.items():
        check_replicable(flow, name, count)
    out = Flow(flow.name)
    for name, handle in flow.operators.items():
        if name not in replicas:
            out.add(handle.operator, name=name)
            continue
        op, count = handle.operator, replicas[name]
        keyed = replicable_kind(op) == PARTITIONED
        link = (SplitMergeLink(count, local=(local or {}).get(name, ()), window_s=window_s)
                if linked is None or name in linked else None)
        check_ends_linked(name, op, link)
        split = out.add(OrderedSplit(count, key=op.key if keyed else None,  # type: ignore[attr-defined]
                                     partitions=getattr(op, "partitions", 1) if keyed else 1, chunk=chunk,
                                     link=link, moves=supports_moves(op),
                                     track_keys=getattr(op, "on_end", None) is not None),
                        name=split_name(name))
        merge = out.add(OrderedMerge(reorder, reorder_capacity, link=link), name=merge_name(name))
        for r in range(count):
            replica = out.add(OrderedReplica(_copy(name, op), r), name=replica_name(name, r))
            out.connect(split.out(r), replica.in_(0))
            out.connect(replica.out(0), merge.in_(0))
    for c in flow.connections:
        src = merge_name(c.src) if c.src in replicas else c.src
        dst = split_name(c.dst) if c.dst in replicas else c.dst
        out.connect(out[src].out(c.src_port), out[dst].in_(c.dst_port))
    return out


def _copy(name: str, op: Any) -> Any:
    try:
        return copy.deepcopy(op)
    except Exception as error:  # noqa: BLE001 - reported with the operator's name
        raise FlowValidationError(f"operator {name!r} cannot be copied for its replicas: {error}",
                                  operator=name) from error


def requested_replicas(flow: Flow, assignment: Mapping[str, int]) -> dict[str, int]:
    """Replica counts named by an assignment's ``"X#r"`` entries (``r`` must run 0..k-1)."""
    seen: dict[str, set[int]] = {}
    for key in assignment:
        parsed = parse_replica_name(key)
        if parsed is not None and parsed[0] in flow.operators and key not in flow.operators:
            seen.setdefault(parsed[0], set()).add(parsed[1])
    counts = {}
    for op, indexes in seen.items():
        if indexes != set(range(len(indexes))):
            raise FlowValidationError(f"placement names replicas {sorted(indexes)} of operator {op!r}; "
                                      f"they must be numbered 0..k-1", operator=op)
        counts[op] = len(indexes)
    return counts


def expand_assignment(flow: Flow, assignment: Mapping[str, int], processes: int,
                      replicas: Mapping[str, int] | str | None = None,
                      stats: Any = None, window_s: float | None = None) -> tuple[Flow, dict[str, int]]:
    """The flow to run and its full assignment, with replicated operators rewritten.

    Replica counts come from ``"X#r"`` entries of ``assignment`` and from
    ``replicas`` (a dict, or "auto" for :func:`choose_replicas` with
    ``stats``); replica ``r`` of a count given only there goes to process
    ``(home + r) % processes``, ``home`` being X's own entry. The split goes
    with X's upstream operator and the merge with its downstream one unless
    placed; an operator with ``on_end`` has its merge with its split. Without
    either, ``flow`` and ``assignment`` come back unchanged. ``window_s``: as for :func:`replicate_flow`.
    """
    counts = requested_replicas(flow, assignment)
    extra = choose_replicas(flow, processes, stats) if replicas == "auto" else dict(replicas or {})
    for name, count in extra.items():
        counts.setdefault(name, count)
    if not counts:
        return flow, dict(assignment)
    full = {name: p for name, p in assignment.items() if name not in counts}
    for name, count in counts.items():
        home = _home(flow, assignment, name)
        for r in range(count):
            full.setdefault(replica_name(name, r), (home + r) % processes)
        full.setdefault(split_name(name), _neighbour(flow, assignment, name, upstream=True, default=home))
        if getattr(flow[name].operator, "on_end", None) is not None:
            full.setdefault(merge_name(name), full[split_name(name)])  # they share the keys' first-seen order
        full.setdefault(merge_name(name), _neighbour(flow, assignment, name, upstream=False, default=home))
    # A split and its merge balance the replicas only when they share a process (they share a link object).
    linked = [name for name in counts if full[split_name(name)] == full[merge_name(name)]]
    local = {name: [r for r in range(count) if full[replica_name(name, r)] == full[split_name(name)]]
             for name, count in counts.items()}
    rewritten = replicate_flow(flow, counts, linked=linked, local=local, window_s=window_s)
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
    """A placement dict for ``Runner(processes=..., placement=...)`` that replicates operators.

    ``placement`` is the base plan for the original operators (anything
    ``Runner(placement=...)`` accepts). ``replicas`` maps operator names to
    replica counts, or is "auto" (:func:`choose_replicas`, from ``stats`` when
    given). Replica ``r`` of ``X`` goes to process ``(home + r) % processes``
    where ``home`` is X's process in the base plan.

    Example::

        plan = replicated_placement(flow, 2, {"sum": 2})
        # {'src': 0, 'sum': 0, 'out': 1, 'sum#0': 0, 'sum#1': 1}
        es.Runner(processes=2, placement=plan).run(flow)
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
