"""The replica graph pass: a flow in, a flow out where named operators run as split → replicas → merge.

An operator ``X`` asked to have ``k`` replicas becomes
``X#split -> X#0 .. X#k-1 -> X#merge`` (C-Stream §4.2; the parts are in
:mod:`elastream.ordered.split_merge`). What may be replicated, and how, is
read from each operator's :class:`~elastream.operators.spec.OperatorSpec`
only: a one-input, one-output batch operator of a parallel kind; a
partitioned one is split by its ``key`` over its ``key_groups`` (so at most
``key_groups`` replicas), its state moves between replicas when
``movable_state``, and an ``on_end`` hook needs ``ends_by_key``. Every
replica gets its own instance of the operator (``Operator.instantiate``).

Backends call :func:`replicate_flow` before they run a flow: the threads
backend directly, the processes backend through
:func:`elastream.processes.replicate.expand_assignment`, which also places
the new operators.

Threading: pure functions of the flow, called from the thread that starts a run.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from elastream.errors import FlowValidationError
from elastream.graph.flow import Flow
from elastream.operators.base import Operator
from elastream.operators.spec import Kind, OperatorSpec, max_parallelism
from elastream.ordered.merge import DEFAULT_REORDER_CAPACITY, OrderedMerge
from elastream.ordered.link import SplitMergeLink
from elastream.ordered.replica import OrderedReplica, replicable_kind
from elastream.ordered.split import OrderedSplit

SEP = "#"
_REPLICA = re.compile(r"^(?P<op>.+)#(?P<index>\d+)$")


def replica_name(op: str, index: int) -> str:
    """Name of replica ``index`` of operator ``op``: ``replica_name("sum", 1) == "sum#1"``."""
    return f"{op}{SEP}{index}"


def split_name(op: str) -> str:
    """Name of the split in front of ``op``'s replicas: ``split_name("sum") == "sum#split"``."""
    return f"{op}{SEP}split"


def merge_name(op: str) -> str:
    """Name of the ordered merge behind ``op``'s replicas: ``merge_name("sum") == "sum#merge"``."""
    return f"{op}{SEP}merge"


def parse_replica_name(name: str) -> tuple[str, int] | None:
    """``("sum", 1)`` for ``"sum#1"``; None for any other name."""
    m = _REPLICA.match(name)
    return (m.group("op"), int(m.group("index"))) if m else None


def max_replicas(op: Operator) -> int:
    """Most replicas ``op`` may have: its kind's maximum degree of parallelism (ordered-multicore §6).

    Unbounded for stateless operators, the key groups for partitioned ones (the unit a split routes).

    Example: ``max_replicas(es.ops.KeyedReduce(abs, max)) == 128``
    """
    spec = op.spec()
    return max_parallelism(spec.kind, spec.key_groups)


def check_replicable(flow: Flow, name: str, count: int) -> None:
    """Raise FlowValidationError unless operator ``name`` of ``flow`` may have ``count`` replicas."""
    if name not in flow.operators:
        raise FlowValidationError(f"replicas name operator {name!r}, which is not in flow {flow.name!r} "
                                  f"(its operators: {', '.join(sorted(flow.operators))})", operator=name)
    op = flow[name].operator
    spec = op.spec()
    kind = replicable_kind(op)
    if kind is None:
        raise FlowValidationError(
            f"operator {name!r} ({type(op).__name__}, kind {spec.kind!r}) cannot be replicated: only one-input, "
            f"one-output stateless or partitioned function operators can", operator=name)
    if count < 1:
        raise FlowValidationError(f"operator {name!r}: replica count must be >= 1, got {count}", operator=name)
    most = max_replicas(op)
    if count > most:
        hint = " (its key groups; declare more with key_by(key, partitions=p))" if kind is Kind.PARTITIONED else ""
        raise FlowValidationError(f"operator {name!r} allows at most {most} parallel instances"
                                  f"{hint}; {count} replicas asked", operator=name)
    if spec.on_end is not None and not spec.ends_by_key:
        raise FlowValidationError(
            f"operator {name!r} has an on_end hook but cannot report its ends per key (end_by_key): its "
            f"end-of-stream outputs follow the keys' first-seen order, which its replicas cannot reproduce; "
            f"run it unreplicated", operator=name)


def check_ends_linked(name: str, op: Operator, link: SplitMergeLink | None) -> None:
    """Raise FlowValidationError when ``op`` has an ``on_end`` hook but its split and merge share no link.

    The merge orders the replicas' end-of-stream outputs by the keys' first-seen order, which only the
    split knows; they share it through the link, that is, in one process.
    """
    if op.spec().on_end is not None and link is None:
        raise FlowValidationError(
            f"operator {name!r} has an on_end hook: its replicas' end-of-stream outputs are put in the keys' "
            f"first-seen order, which only its split knows; place {split_name(name)!r} and {merge_name(name)!r} "
            f"in one process", operator=name)


def replicate_flow(flow: Flow, replicas: Mapping[str, int], *, chunk: int | None = None,
                   reorder: str = "nonblocking", reorder_capacity: int = DEFAULT_REORDER_CAPACITY,
                   linked: Collection[str] | None = None,
                   local: Mapping[str, Collection[int]] | None = None, window_s: float | None = None,
                   active: Mapping[str, Sequence[int]] | None = None) -> Flow:
    """A new flow where each operator named in ``replicas`` runs as split → replicas → ordered merge.

    The original flow is left untouched; every replica gets its own instance
    of the operator. Connections into ``X`` enter ``X#split``, connections out
    of ``X`` leave ``X#merge``. ``chunk`` fixes the split's batch size (default:
    about :data:`~elastream.ordered.split.PIECE_S` of replica work per piece once measured, else
    :data:`~elastream.ordered.split.DEFAULT_CHUNK`). The split and merge of the operators in
    ``linked`` (default: all) share a :class:`~elastream.ordered.link.SplitMergeLink`
    — only valid when they will run in the same process — which bounds
    backlogs and balances the replicas (moving key groups with their state);
    ``local`` names, per operator, the replicas placed in the split's process
    (the link gives them a shorter backlog: the split refills them at once); ``window_s`` is the
    work a remote replica may have in hand (see :class:`~elastream.ordered.link.SplitMergeLink`);
    ``active`` names, per operator, the replicas that take work from the start (default: all; the
    others are held ready until :meth:`~elastream.ordered.split.OrderedSplit.set_active` adds them).

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
        link = (SplitMergeLink(count, local=(local or {}).get(name, ()), window_s=window_s)
                if linked is None or name in linked else None)
        check_ends_linked(name, op, link)
        split = out.add(_split_for(op.spec(), count, chunk, link, (active or {}).get(name)), name=split_name(name))
        merge = out.add(OrderedMerge(reorder, reorder_capacity, link=link), name=merge_name(name))
        for r in range(count):
            replica = out.add(OrderedReplica(_copy(name, op), r, origin=name), name=replica_name(name, r))
            out.connect(split.out(r), replica.in_(0))
            out.connect(replica.out(0), merge.in_(0))
    for c in flow.connections:
        src = merge_name(c.src) if c.src in replicas else c.src
        dst = split_name(c.dst) if c.dst in replicas else c.dst
        out.connect(out[src].out(c.src_port), out[dst].in_(c.dst_port))
    return out


def _split_for(spec: OperatorSpec, count: int, chunk: int | None, link: SplitMergeLink | None,
               active: Sequence[int] | None = None) -> OrderedSplit:
    """The split in front of ``count`` replicas of an operator: by key over its key groups when partitioned.

    ``active``: the replicas that take work from the start, when the split can add the others later
    (a keyed split only with a link and movable state: its key groups must move there with their state).
    """
    keyed = spec.kind is Kind.PARTITIONED
    if keyed and (link is None or not spec.movable_state):
        active = None
    return OrderedSplit(count, key=spec.key if keyed else None, partitions=spec.key_groups if keyed else 1,
                        chunk=chunk, link=link, moves=spec.movable_state, track_keys=spec.on_end is not None,
                        active=active)


def _copy(name: str, op: Any) -> Any:
    """A replica's own instance of ``op`` (its per-key state is created afresh when the replica opens)."""
    try:
        return op.instantiate()
    except Exception as error:  # noqa: BLE001 - reported with the operator's name
        raise FlowValidationError(f"operator {name!r} cannot be copied for its replicas: {error}",
                                  operator=name) from error
