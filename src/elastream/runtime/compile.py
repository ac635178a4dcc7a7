"""Compile a validated flow into runtime tasks, buffers and contexts.

Runs in the thread that starts the run, before any worker exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastream.graph.flow import Flow
from elastream.operators.base import Operator
from elastream.operators.spec import Driver, OperatorSpec
from elastream.runtime.allotment import ParallelFunctionTask, wants_allotment
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.task import CoroutineTask, FunctionTask, SourceTask, Task


@dataclass(slots=True)
class CompiledFlow:
    """Tasks in flow order, plus each task's context."""

    tasks: list[Task]
    contexts: dict[str, Context]


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
              partitioning: str) -> Task:
    """The task of one operator instance: shared by several workers when its spec allows it (ordered-multicore §2.2)."""
    spec = op.spec()
    if wants_allotment(spec, threads):
        return ParallelFunctionTask(name, op, index, batch_size, reorder=reorder, partitioning=partitioning,
                                    spec=spec)
    return task_class(spec)(name, op, index, batch_size, spec)


def compile_flow(flow: Flow, *, max_queue_size: int, batch_size: int, threads: int = 1,
                 reorder: str = "nonblocking", partitioning: str = "hybrid") -> CompiledFlow:
    """Create one task per operator and one buffer per input port.

    A port holds ``max_queue_size`` tuples, or more when its operator declares
    ``input_capacity`` or the operator feeding it declares ``output_capacity``.

    With ``threads > 1``, stateless and partitioned function operators get a
    :class:`~elastream.runtime.allotment.ParallelFunctionTask` whose order
    keeping uses the ``reorder`` and ``partitioning`` schemes.
    """
    flow.validate()
    tasks: dict[str, Task] = {}
    for i, (name, handle) in enumerate(flow.operators.items()):
        op = handle.operator.instantiate()  # the run's own instance: the flow's object keeps no run state
        task = make_task(name, op, i, batch_size=batch_size, threads=threads, reorder=reorder,
                         partitioning=partitioning)
        # An operator may need more input buffered than max_queue_size (an ordered split cuts whole batches).
        capacity = max(max_queue_size, task.spec.input_capacity)
        task.inputs = [PortBuffer(task, p, capacity, f"{name}.in_({p})") for p in range(op.n_inputs)]
        tasks[name] = task
    for c in flow.connections:
        src, dst = tasks[c.src], tasks[c.dst]
        buf = dst.inputs[c.dst_port]
        # An operator may also emit in bursts larger than max_queue_size (an ordered merge releasing
        # parked batches); its consumer's port then holds a whole burst, so the producer need not
        # come back once per max_queue_size tuples.
        buf.capacity = max(buf.capacity, src.spec.output_capacity)
        src.outputs[c.src_port].append(buf)
        buf.publishers.append(src)
        buf.open_publishers += 1
    _link(tasks)
    contexts = {}
    for name, task in tasks.items():
        inputs = [InputPort(b, task, i) for i, b in enumerate(task.inputs)]
        outputs = [OutputPort(task, i) for i in range(len(task.outputs))]
        contexts[name] = Context(task, inputs, outputs)
    return CompiledFlow(list(tasks.values()), contexts)
