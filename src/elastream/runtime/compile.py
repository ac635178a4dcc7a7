"""Compile a validated flow into runtime tasks, buffers and contexts.

Runs in the thread that starts the run, before any worker exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elastream.graph.flow import Flow
from elastream.operators.base import Operator
from elastream.operators.spec import Driver, OperatorSpec
from elastream.runtime.allotment import ParallelFunctionTask, wants_allotment
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.fusion import FusedChain, find_chains, fused_name
from elastream.runtime.sourced import SourceChainTask, SourcedChain, find_source_joins
from elastream.runtime.task import CoroutineTask, FunctionTask, SourceTask, Task


@dataclass(slots=True)
class CompiledFlow:
    """Tasks in flow order, plus each task's context.

    ``instances`` holds every operator's run instance by its name (a fused chain's members
    too: ``handle.operator(name)`` and the results read it); ``fused`` the chains that run as
    one task, each as its members' names in flow order (:mod:`elastream.runtime.fusion`).
    """

    tasks: list[Task]
    contexts: dict[str, Context]
    instances: dict[str, Operator] = field(default_factory=dict)
    fused: tuple[tuple[str, ...], ...] = ()


def _link(tasks: dict[str, Task]) -> None:
    """Fill upstream/downstream lists and each task's position (longest path from a source)."""
    for task in tasks.values():
        for subs in task.outputs:
            for buf in subs:
                if buf.owner not in task.downstream:
                    task.downstream.append(buf.owner)
                if task not in buf.owner.upstream:
                    buf.owner.upstream.append(task)
    indegree = {t: sum(1 for u in t.upstream if not _is_control_edge(u, t)) for t in tasks.values()}
    ready = [t for t in tasks.values() if indegree[t] == 0]
    while ready:
        t = ready.pop()
        for d in t.downstream:
            if _is_control_edge(t, d):
                continue
            d.position = max(d.position, t.position + 1)
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)


def relink(tasks: list[Task]) -> None:
    """Recompute every task's upstream and downstream lists and position from its output buffers.

    For a running flow whose tasks changed (:mod:`elastream.runtime.refuse`), under the scheduler's lock.
    """
    for t in tasks:
        t.upstream, t.downstream, t.position = [], [], 0
    _link({t.name: t for t in tasks})


def _is_control_edge(src: Task, dst: Task) -> bool:
    """True when every connection src → dst enters a control input (feedback loops)."""
    ports = [b.port for subs in src.outputs for b in subs if b.owner is dst]
    return bool(ports) and all(p in dst.op.control_inputs for p in ports)


#: Which task drives an operator (on one worker at a time), by the API its spec declares.
TASK_CLASSES: dict[Driver, type[Task]] = {Driver.PULL: SourceTask, Driver.BATCH: FunctionTask,
                                          Driver.COROUTINE: CoroutineTask}


def task_class(spec: OperatorSpec) -> type[Task]:
    """Which driver runs an operator of ``spec`` (on one worker at a time)."""
    return TASK_CLASSES[spec.driver]


def make_task(name: str, op: Operator, index: int, *, batch_size: int, threads: int, reorder: str,
              partitioning: str, spec: OperatorSpec | None = None) -> Task:
    """The task of one operator instance: shared by several workers when its spec allows it (ordered-multicore §2.2)."""
    spec = op.spec() if spec is None else spec
    if wants_allotment(spec, threads):
        return ParallelFunctionTask(name, op, index, batch_size, reorder=reorder, partitioning=partitioning,
                                    spec=spec)
    return task_class(spec)(name, op, index, batch_size, spec)


def compile_flow(flow: Flow, *, max_queue_size: int, batch_size: int, threads: int = 1,
                 reorder: str = "nonblocking", partitioning: str = "hybrid", fuse: bool = False,
                 wide: bool = False) -> CompiledFlow:
    """Create one task per operator (per fused chain with ``fuse``) and one buffer per input port.

    A port holds ``max_queue_size`` tuples, or more when its operator declares
    ``input_capacity`` or the operator feeding it declares ``output_capacity``.

    With ``threads > 1``, stateless and partitioned function operators get a
    :class:`~elastream.runtime.allotment.ParallelFunctionTask` whose order
    keeping uses the ``reorder`` and ``partitioning`` schemes.

    With ``fuse``, each maximal chain of consecutive stateless function operators
    runs as one task (:mod:`elastream.runtime.fusion`). Off by default here, so
    tests driving tasks one by one see one task per operator; runs take it from
    ``SchedulingConfig(fuse=...)``, on by default. ``wide`` fuses stateful operators and sinks too
    (the manual model: :func:`~elastream.runtime.fusion.fusable`), and joins each pulled source to
    the chain it feeds, which it then calls per batch with no buffer between them
    (:mod:`elastream.runtime.sourced`); ``fused`` lists such a group with its source first.
    """
    flow.validate()
    instances = {name: handle.operator.instantiate() for name, handle in flow.operators.items()}
    specs = {name: op.spec() for name, op in instances.items()}
    chains = find_chains(flow, specs, instances, threads, wide) if fuse else []
    if fuse and wide:
        joined = find_source_joins(flow, specs, instances, chains)
        heads = {group[1] for group in joined}
        order = {name: i for i, name in enumerate(flow.operators)}
        chains = sorted([c for c in chains if c[0] not in heads] + joined, key=lambda group: order[group[0]])
    chain_of = {name: chain for chain in chains for name in chain}
    tasks: dict[str, Task] = {}       # by task name
    task_of: dict[str, Task] = {}     # by operator name (every member of a chain maps to its task)
    for i, name in enumerate(flow.operators):
        chain = chain_of.get(name)
        if chain is not None and name != chain[0]:
            continue                  # a later member: its chain's task exists already
        if chain and specs[name].driver is Driver.PULL:
            task = _make_sourced_task(chain, instances, specs, i, batch_size=batch_size,
                                      capacity=max(max_queue_size, specs[chain[1]].input_capacity))
        elif chain:
            task = _make_chain_task(chain, instances, specs, i, batch_size=batch_size, threads=threads,
                                    reorder=reorder, partitioning=partitioning)
        else:
            task = make_task(name, instances[name], i, batch_size=batch_size, threads=threads, reorder=reorder,
                             partitioning=partitioning, spec=specs[name])
            if isinstance(task.op, FusedChain):
                task.op.bind(task)    # a chain the flow holds as one operator (elastic.units): members named too
        # An operator may need more input buffered than max_queue_size (an ordered split cuts whole batches).
        capacity = max(max_queue_size, task.spec.input_capacity)
        task.inputs = [PortBuffer(task, p, capacity, f"{name}.in_({p})") for p in range(task.op.n_inputs)]
        tasks[task.name] = task
        for member in chain or (name,):
            task_of[member] = task
    _connect(flow, task_of, chain_of)
    _link(tasks)
    contexts = {}
    for name, task in tasks.items():
        inputs = [InputPort(b, task, i) for i, b in enumerate(task.inputs)]
        outputs = [OutputPort(task, i) for i in range(len(task.outputs))]
        contexts[name] = Context(task, inputs, outputs)
    return CompiledFlow(list(tasks.values()), contexts, instances, tuple(chains))


def _make_chain_task(chain: tuple[str, ...], instances: dict[str, Operator], specs: dict[str, OperatorSpec],
                     index: int, **options: Any) -> Task:
    """One task running the operators of ``chain`` (flow order) as a :class:`FusedChain`."""
    op = FusedChain(chain, [instances[n] for n in chain], [specs[n] for n in chain])
    task = make_task(fused_name(chain), op, index, spec=op.spec(), **options)
    op.bind(task)
    return task


def _make_sourced_task(group: tuple[str, ...], instances: dict[str, Operator], specs: dict[str, OperatorSpec],
                       index: int, *, batch_size: int, capacity: int) -> Task:
    """One task pulling the source ``group[0]`` and calling the chain of the rest on each batch (the manual model);
    ``capacity``: what the chain's input port would have held."""
    rest = group[1:]
    chain = FusedChain(rest, [instances[n] for n in rest], [specs[n] for n in rest])
    op = SourcedChain(group[0], instances[group[0]], specs[group[0]], chain, capacity)
    task = SourceChainTask(fused_name(group), op, index, batch_size, op.spec())
    op.bind(task)
    return task


def _connect(flow: Flow, task_of: dict[str, Task], chain_of: dict[str, tuple[str, ...]]) -> None:
    """Wire each connection between two tasks to the consumer's input buffer (a chain's inner ones are calls)."""
    for c in flow.connections:
        chain = chain_of.get(c.src)
        if chain is not None and chain is chain_of.get(c.dst):
            continue                  # inside a fused chain: the stages call each other
        src, dst = task_of[c.src], task_of[c.dst]
        buf = dst.inputs[c.dst_port]
        # An operator may also emit in bursts larger than max_queue_size (an ordered merge releasing
        # parked batches); its consumer's port then holds a whole burst, so the producer need not
        # come back once per max_queue_size tuples.
        buf.capacity = max(buf.capacity, src.spec.output_capacity)
        src.outputs[c.src_port].append(buf)
        buf.publishers.append(src)
        buf.open_publishers += 1
