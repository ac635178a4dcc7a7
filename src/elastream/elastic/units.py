"""Replication units: what an elastic run over several processes replicates, one replica per process.

C-Stream §4.2 replicates single operators; a chain of stateless operators is
better replicated as one unit (Flink's chaining, IBM Streams' fusion): each
process then runs the whole chain on its share of the data instead of the
chain being cut in two halves that pay pipeline fill and drain. So:

* every maximal chain of fusable stateless operators (:func:`~elastream.runtime.fusion.find_chains`)
  becomes one operator, a :class:`~elastream.runtime.fusion.FusedChain` named after its
  members (``"parse+clean+score"``), in a rewritten flow;
* that chain, every other replicable stateless operator and every partitioned
  operator whose state can follow its key groups get one replica per process.

The replicas are held ready rather than sized up front: a stateless split
sends each batch to the least loaded replica and a keyed split moves key
groups (with their state) to replicas that run dry (:mod:`elastream.ordered.rebalance`),
so a replica on a process with nothing else to do takes the work and one on a
busy process takes little.

Threading: pure functions of the flow, called from the thread that starts a run.

Example::

    unit_flow, counts = replication_units(flow, processes=2)
    counts      # {'parse+clean+score': 2, 'sum': 2}
"""

from __future__ import annotations

from elastream.errors import FlowValidationError
from elastream.graph.flow import Flow
from elastream.ordered.replicate import check_replicable
from elastream.runtime.fusion import FusedChain, find_chains

#: Joins member names into a fused chain's operator name.
CHAIN_JOIN = "+"


def fuse_chains(flow: Flow) -> Flow:
    """``flow`` with each maximal fusable chain replaced by one FusedChain operator (the flow itself when none)."""
    instances = {name: handle.operator for name, handle in flow.operators.items()}
    specs = {name: op.spec() for name, op in instances.items()}
    chains = find_chains(flow, specs, instances)
    if not chains:
        return flow
    head_of = {member: chain for chain in chains for member in chain}
    out = Flow(flow.name)
    for name, handle in flow.operators.items():
        chain = head_of.get(name)
        if chain is None:
            out.add(handle.operator, name=name)
        elif name == chain[0]:
            out.add(FusedChain(chain, [instances[m] for m in chain], [specs[m] for m in chain]),
                    name=CHAIN_JOIN.join(chain))
    renamed = {member: CHAIN_JOIN.join(chain) for chain in chains for member in chain}
    for c in flow.connections:
        if c.src in head_of and c.dst in head_of and head_of[c.src] is head_of[c.dst]:
            continue  # inside a chain
        src, dst = renamed.get(c.src, c.src), renamed.get(c.dst, c.dst)
        out.connect(out[src].out(c.src_port), out[dst].in_(c.dst_port))
    return out


def replication_units(flow: Flow, processes: int) -> tuple[Flow, dict[str, int]]:
    """The flow with its chains fused and the replica count of each unit (``processes`` each)."""
    if processes < 2:
        return flow, {}
    fused = fuse_chains(flow)
    counts = {}
    for name in fused.operators:
        try:
            check_replicable(fused, name, processes)
        except FlowValidationError:
            continue  # not replicable (a source, a sink, a coroutine, too few key groups, an unordered on_end)
        counts[name] = processes
    return fused, counts
