"""Build frozen statistics snapshots from live runtime counters.

Called from any thread (the monitor, a progress display, ``handle.stats()``);
reads counters without locks, so a snapshot is approximate but never blocks
the flow.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

from elastream.metrics.stats import FlowStats, OperatorStats, PortStats, WorkerStats

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task
    from elastream.runtime.workers import WorkerPool


def port_stats(buf: PortBuffer, now: float) -> PortStats:
    """Snapshot of one input buffer."""
    life = now - buf.created
    front = buf.front_times()
    return PortStats(
        operator=buf.owner.name, port=buf.port, size=buf.count, capacity=buf.capacity,
        max_size=buf.max_count, writes=buf.writes, reads=buf.reads, dropped=buf.dropped,
        closed=buf.closed, publishers=len(buf.publishers),
        write_blocked_ratio=buf.full_seconds(now) / life if life > 0 else 0.0,
        front_wait_s=(now - front[0]) if front else 0.0,
    )


def operator_stats(task: Task, now: float) -> OperatorStats:
    """Snapshot of one operator."""
    waits = task.conj_waits + task.disj_waits
    inputs = tuple(port_stats(b, now) for b in task.inputs)
    out_ratio = 0.0
    for subs in task.outputs:
        for b in subs:
            life = now - b.created
            if life > 0:
                out_ratio = max(out_ratio, b.full_seconds(now) / life)
    return OperatorStats(
        name=task.name, kind=task.kind, state=task.state.value, activations=task.activations,
        busy_s=task.busy_s, read_blocked_s=task.read_blocked_s, write_blocked_s=task.write_blocked_s,
        tuples_in=task.tuples_in, tuples_out=task.tuples_out, last_scheduled=task.last_scheduled,
        read_rate=task.read_rate, write_rate=task.write_rate,
        conjunctive_wait_fraction=task.conj_waits / waits if waits else 0.0,
        disjunctive_wait_fraction=task.disj_waits / waits if waits else 0.0,
        output_write_blocked_ratio=out_ratio, inputs=inputs, malformed=task.malformed,
        cpu_s=task.cpu_s, sent=_sent_by_operator(task), workers=task.workers, peak_workers=task.peak_workers,
        max_workers=task.max_workers if task.shared else 1, key_group_load=task.op.key_group_load(),
    )


def _sent_by_operator(task: Task) -> dict[str, int]:
    sent: dict[str, int] = {}
    for buf, n in list(task.sent.items()):
        name = buf.owner.name
        sent[name] = sent.get(name, 0) + n
    return sent


def take_snapshot(sched: Scheduler, pool: WorkerPool, started: float, policy_name: str) -> FlowStats:
    """Snapshot of a whole running (or finished) flow."""
    now = perf_counter()
    workers = tuple(
        WorkerStats(index=w.index, alive=w.alive, busy_s=w.busy_s, idle_s=w.idle_s,
                    alive_s=(w.ended or now) - w.started, dispatches=w.dispatches,
                    utilisation=w.utilisation(now), cpu_s=w.cpu_s)
        for w in pool.workers)
    return FlowStats(
        elapsed_s=now - started, threads=pool.target, policy=policy_name,
        operators={t.name: operator_stats(t, now) for t in sched.tasks}, workers=workers,
    )
