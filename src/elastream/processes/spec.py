"""Split a flow into per-process parts with ring proxies at the cut edges.

Runs in the parent before any worker process starts. Every connection whose
ends are placed on different processes becomes a *cross edge*: a
:class:`~elastream.processes.proxies.RingSender` fed by the producing port in
the source process and a :class:`~elastream.processes.proxies.RingReceiver`
feeding the consuming port in the destination process, joined by one
single-producer ring per edge (so no edge can block another: no head-of-line
blocking between streams).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field, replace
from typing import Any

import cloudpickle

from elastream.errors import FlowValidationError
from elastream.graph.flow import Connection, Flow
from elastream.runtime.config import RunConfig
from elastream.ordered.split_merge import OrderedSplit

PROXY_PREFIX = "__ring_"
#: How deep :func:`find_unpicklable` looks inside an operator for the object that cannot be pickled.
UNPICKLABLE_SEARCH_DEPTH = 6
#: How many items of one container or object it tries at each level.
UNPICKLABLE_SEARCH_WIDTH = 200
#: Longest quantum (ms) in a process that hosts a balancing split/merge pair.
BALANCING_QUANTUM_MS = 10.0


@dataclass(frozen=True, slots=True)
class CrossEdge:
    """One stream connection between two processes."""

    edge: int
    conn: Connection
    src_process: int
    dst_process: int
    ring_name: str

    @property
    def sender_name(self) -> str:
        """Name of the sending proxy operator in the source process."""
        return f"{PROXY_PREFIX}send_{self.edge}"

    @property
    def receiver_name(self) -> str:
        """Name of the receiving proxy operator in the destination process."""
        return f"{PROXY_PREFIX}recv_{self.edge}"


@dataclass(slots=True)
class ChildSpec:
    """Everything one worker process needs to build and run its part of the flow."""

    index: int
    flow_name: str
    operators: list[tuple[str, Any]] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)
    outgoing: list[CrossEdge] = field(default_factory=list)
    incoming: list[CrossEdge] = field(default_factory=list)
    config: RunConfig = field(default_factory=RunConfig)
    """The part's own engine configuration (one process, threads backend)."""
    batch_size: int = 256
    query_tags: dict[str, tuple[str, str]] = field(default_factory=dict)
    """(query, priority class) of the part's operators that have one in the whole flow (tagged or inherited)."""
    held_rings: frozenset[str] = frozenset()
    """Rings to and from workers held ready (processes.held_start): this part's ends map their pages as they
    first use them, not up front, since most runs never start those workers."""


class UnpicklableOperatorError(FlowValidationError):
    """An operator placed on a worker process holds something that cannot be pickled (sent to that process).

    ``operator`` names it, ``where`` says where inside it the culprit sits (e.g.
    ``attribute 'fn' -> closure variable 'f'``) and ``__cause__`` is pickle's own error.
    """

    def __init__(self, operator: str, op: Any, process: int, where: str, culprit: Any, cause: BaseException):
        what = f"{where} is a {type(culprit).__name__}, which" if where else "it"
        super().__init__(
            f"operator {operator!r} ({type(op).__name__}) cannot be sent to worker process {process}: {what} "
            f"cannot be pickled ({type(cause).__name__}: {cause}). An open file, a lock, a socket or a "
            f"generator cannot cross processes: create it in the operator's open() or inside the function "
            f"(open the file there), or keep the operator in this process with "
            f"placement={{{operator!r}: 0, ...}}", operator=operator)
        self.where = where


def pickle_specs(specs: list[ChildSpec]) -> list[bytes]:
    """Each worker's ChildSpec, cloudpickled; an operator that cannot be raises :class:`UnpicklableOperatorError`."""
    payloads = []
    for spec in specs:
        try:
            payloads.append(cloudpickle.dumps(spec))
        except Exception as error:  # noqa: BLE001 - pickle raises many kinds (TypeError, PicklingError, ...)
            raise _blame_operator(spec, error) from error
    return payloads


def _blame_operator(spec: ChildSpec, error: Exception) -> Exception:
    """The error naming the operator of ``spec`` that cannot be pickled (``error`` itself if none alone fails)."""
    for name, op in spec.operators:
        found = find_unpicklable(op)
        if found is not None:
            where, culprit, cause = found
            return UnpicklableOperatorError(name, op, spec.index, where, culprit, cause)
    return error


def find_unpicklable(obj: Any, depth: int = UNPICKLABLE_SEARCH_DEPTH) -> tuple[str, Any, Exception] | None:
    """(where, object, pickle's error) for the innermost part of ``obj`` that cannot be pickled; None if it can.

    ``where`` is a path of attributes, closure variables, globals and items (empty: ``obj`` itself).
    Only called after pickling failed, so its cost never touches a run that starts.

    Example: ``find_unpicklable(lambda: lock)[0] == "global 'lock'"`` for a ``threading.Lock`` global.
    """
    try:
        cloudpickle.dumps(obj)
        return None
    except Exception as error:  # noqa: BLE001 - any failure to pickle
        cause = error
    if depth > 0:
        for label, part in _parts(obj):
            found = find_unpicklable(part, depth - 1)
            if found is not None:
                where, culprit, inner = found
                return (f"{label} -> {where}" if where else label), culprit, inner
    return "", obj, cause


def _parts(obj: Any) -> list[tuple[str, Any]]:
    """What pickling ``obj`` pickles too, each with a label for the user."""
    if isinstance(obj, types.FunctionType):
        return _function_parts(obj)
    if isinstance(obj, types.MethodType):
        return [("method's object", obj.__self__)]
    if isinstance(obj, dict):
        return [(f"item {k!r}", v) for k, v in list(obj.items())[:UNPICKLABLE_SEARCH_WIDTH]]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"item {i}", v) for i, v in enumerate(list(obj)[:UNPICKLABLE_SEARCH_WIDTH])]
    state = getattr(obj, "__dict__", None)
    parts = list(state.items()) if isinstance(state, dict) else []
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot):
                parts.append((slot, getattr(obj, slot)))
    return [(f"attribute {k!r}", v) for k, v in parts[:UNPICKLABLE_SEARCH_WIDTH]]


def _function_parts(fn: types.FunctionType) -> list[tuple[str, Any]]:
    parts: list[tuple[str, Any]] = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            parts.append((f"closure variable {name!r}", cell.cell_contents))
        except ValueError:
            continue  # an empty cell
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            parts.append((f"global {name!r}", fn.__globals__[name]))
    parts.extend((f"default {i}", d) for i, d in enumerate(fn.__defaults__ or ()))
    return parts


def is_proxy(name: str) -> bool:
    """True for the ring proxy operators the runtime adds."""
    return name.startswith(PROXY_PREFIX)


def cross_edges(flow: Flow, assignment: dict[str, int]) -> list[tuple[int, Connection, int, int]]:
    """(edge id, connection, source process, destination process) for every cut connection."""
    out = []
    for conn in flow.connections:
        a, b = assignment[conn.src], assignment[conn.dst]
        if a != b:
            out.append((len(out), conn, a, b))
    return out


def split_flow(flow: Flow, assignment: dict[str, int], processes: int, ring_names: dict[int, str],
               config: RunConfig) -> list[ChildSpec]:
    """One ChildSpec per process; ``ring_names`` maps cross-edge id to its ring."""
    missing = [name for name in flow.operators if name not in assignment]
    if missing:
        raise ValueError(f"placement assigns no process to {missing}")
    bad = {n: p for n, p in assignment.items() if not 0 <= p < processes}
    if bad:
        raise ValueError(f"placement uses processes outside 0..{processes - 1}: {bad}")
    specs = [ChildSpec(index=i, flow_name=f"{flow.name}[{i}]", config=config,
                       batch_size=config.batch_size) for i in range(processes)]
    tags = flow.inherited_query_tags()
    for name, handle in flow.operators.items():
        specs[assignment[name]].operators.append((name, handle.operator))
        if name in tags:
            specs[assignment[name]].query_tags[name] = tags[name]
    for edge, conn, a, b in cross_edges(flow, assignment):
        ce = CrossEdge(edge, conn, a, b, ring_names[edge])
        specs[a].outgoing.append(ce)
        specs[b].incoming.append(ce)
    for conn in flow.connections:
        if assignment[conn.src] == assignment[conn.dst]:
            specs[assignment[conn.src]].connections.append(conn)
    balancing = {name for name, h in flow.operators.items()
                 if isinstance(h.operator, OrderedSplit) and h.operator.link is not None}
    steered = {c.dst for c in flow.connections if c.src in balancing}
    for spec in specs:
        if any(name in balancing or name in steered for name, _ in spec.operators):
            # A balancing split steers by the progress its merge sees; with long quanta that news
            # waits behind whichever operator holds a process's worker (a replica computing).
            spec.config = replace(spec.config, quantum_ms=min(spec.config.quantum_ms, BALANCING_QUANTUM_MS))
    return specs


def build_child_flow(spec: ChildSpec) -> Flow:
    """The flow one worker process runs: its operators plus ring proxies."""
    from elastream.processes.proxies import RingReceiver, RingSender

    flow = Flow(spec.flow_name)
    handles = {name: flow.add(op, name=name) for name, op in spec.operators}
    for c in spec.connections:
        flow.connect(handles[c.src].out(c.src_port), handles[c.dst].in_(c.dst_port))
    for ce in spec.outgoing:
        sender = flow.add(RingSender(ce.ring_name, batch_size=spec.batch_size, peer=ce.conn.dst,
                                     in_flight_bytes=spec.config.process.ring_in_flight_bytes,
                                     prefault=ce.ring_name not in spec.held_rings), name=ce.sender_name)
        flow.connect(handles[ce.conn.src].out(ce.conn.src_port), sender.in_(0))
    for ce in spec.incoming:
        receiver = flow.add(RingReceiver(ce.ring_name, peer=ce.conn.src, prefault=ce.ring_name not in spec.held_rings),
                            name=ce.receiver_name)
        flow.connect(receiver.out(0), handles[ce.conn.dst].in_(ce.conn.dst_port))
    for name, (query, priority) in spec.query_tags.items():
        flow.tag_query(name, query=query, priority=priority)
    return flow


class SpecPart:
    """What the parent's record of a part (in this process or a worker) reads off its :class:`ChildSpec`."""

    spec: ChildSpec

    @property
    def index(self) -> int:
        """The part's process index."""
        return self.spec.index

    @property
    def operators(self) -> list[str]:
        """Names of the operators this part runs."""
        return [name for name, _ in self.spec.operators]
