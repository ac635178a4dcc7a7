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

from dataclasses import dataclass, field, replace
from typing import Any

from elastream.graph.flow import Connection, Flow
from elastream.runtime.config import RunConfig
from elastream.ordered.split_merge import OrderedSplit

PROXY_PREFIX = "__ring_"
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
    for name, handle in flow.operators.items():
        specs[assignment[name]].operators.append((name, handle.operator))
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
        sender = flow.add(RingSender(ce.ring_name, batch_size=spec.batch_size), name=ce.sender_name)
        flow.connect(handles[ce.conn.src].out(ce.conn.src_port), sender.in_(0))
    for ce in spec.incoming:
        receiver = flow.add(RingReceiver(ce.ring_name), name=ce.receiver_name)
        flow.connect(receiver.out(0), handles[ce.conn.dst].in_(ce.conn.dst_port))
    return flow
