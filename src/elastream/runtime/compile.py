"""Compile a validated flow into runtime tasks, buffers and contexts.

Runs in the thread that starts the run, before any worker exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastream.graph.flow import Flow
from elastream.operators.base import FunctionOperator, SourceOperator
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.task import CoroutineTask, FunctionTask, SourceTask, Task


@dataclass(slots=True)
class CompiledFlow:
    """Tasks in flow order, plus each task's context."""

    tasks: list[Task]
    contexts: dict[str, Context]


def task_class(op: object) -> type[Task]:
    """Which driver runs an operator."""
    if isinstance(op, SourceOperator):
        return SourceTask
    if isinstance(op, FunctionOperator):
        return FunctionTask
    return CoroutineTask


def compile_flow(flow: Flow, *, max_queue_size: int, batch_size: int) -> CompiledFlow:
    """Create one task per operator and one buffer per input port."""
    flow.validate()
    tasks: dict[str, Task] = {}
    for i, (name, handle) in enumerate(flow.operators.items()):
        op = handle.operator
        task = task_class(op)(name, op, i, batch_size)
        task.inputs = [PortBuffer(task, p, max_queue_size, f"{name}.in_({p})") for p in range(op.n_inputs)]
        tasks[name] = task
    for c in flow.connections:
        src, dst = tasks[c.src], tasks[c.dst]
        buf = dst.inputs[c.dst_port]
        src.outputs[c.src_port].append(buf)
        buf.publishers.append(src)
        buf.open_publishers += 1
    contexts = {}
    for name, task in tasks.items():
        inputs = [InputPort(b, task, i) for i, b in enumerate(task.inputs)]
        outputs = [OutputPort(task, i) for i in range(len(task.outputs))]
        contexts[name] = Context(task, inputs, outputs)
    return CompiledFlow(list(tasks.values()), contexts)
