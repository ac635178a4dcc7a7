"""Build frozen statistics snapshots from live runtime counters.

Called from any thread (the monitor, a progress display, ``handle.stats()``);
reads counters without locks, so a snapshot is approximate but never blocks
the flow. A fused chain's task is listed as its member operators
(:func:`member_stats`), so statistics name every operator of the flow.
"""

from __future__ import annotations

from dataclasses import replace
from time import perf_counter
from typing import TYPE_CHECKING

from elastream.metrics.stats import FlowStats, OperatorStats, PortStats, WorkerStats
from elastream.runtime.fusion import MemberRunner, entry_name, member_runner
from elastream.runtime.states import OperatorState

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


#: No activation in progress: (busy seconds, CPU seconds) to add.
IDLE = (0.0, 0.0)


def operator_stats(task: Task, now: float, sched_now: float | None = None,
                   running: tuple[float, float] = IDLE) -> OperatorStats:
    """Snapshot of one operator (with ``sched_now``, the scheduler clock's now: its wait in progress too;
    ``running``: the busy and CPU seconds of its activations in progress, :meth:`Worker.in_progress`)."""
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
        busy_s=task.busy_s + running[0],
        read_blocked_s=task.read_blocked_s + _blocked_now(task, sched_now, _READ_WAITS),
        write_blocked_s=task.write_blocked_s + _blocked_now(task, sched_now, _WRITE_WAITS),
        tuples_in=task.tuples_in, tuples_out=task.tuples_out, last_scheduled=task.last_scheduled,
        read_rate=task.read_rate, write_rate=task.write_rate,
        conjunctive_wait_fraction=task.conj_waits / waits if waits else 0.0,
        disjunctive_wait_fraction=task.disj_waits / waits if waits else 0.0,
        output_write_blocked_ratio=out_ratio, inputs=inputs, malformed=task.malformed,
        cpu_s=task.cpu_s + running[1], sent=_sent_by_operator(task), workers=task.workers,
        peak_workers=task.peak_workers,
        max_workers=task.max_workers if task.shared else 1, key_group_load=task.op.key_group_load(),
        longest_hold_s=getattr(task.op, "longest_hold_s", 0.0),
    )


#: The states whose time counts as waiting for input (data, or a sleeping operator's time) or for room.
_READ_WAITS = frozenset({OperatorState.READ_BLOCKED, OperatorState.SLEEPING})
_WRITE_WAITS = frozenset({OperatorState.WRITE_BLOCKED})


def _blocked_now(task: Task, now: float | None, states: frozenset) -> float:
    """The wait in progress, so that a long one shows in the periods it spans, not only the one it ends in."""
    return max(0.0, now - task.blocked_since) if now is not None and task.state in states else 0.0


def _sent_by_operator(task: Task) -> dict[str, int]:
    sent: dict[str, int] = {}
    for buf, n in list(task.sent.items()):
        name = entry_name(buf.owner)  # a fused consumer's input is its first member's
        sent[name] = sent.get(name, 0) + n
    return sent


def task_stats(task: Task, now: float, sched_now: float | None = None,
               running: tuple[float, float] = IDLE) -> list[OperatorStats]:
    """The operators ``task`` runs: itself, or each member of the chain it fuses (flow order)."""
    chain = member_runner(task)
    if chain is None:
        return [operator_stats(task, now, sched_now, running)]
    return member_stats(task, chain, now, sched_now, running)


def member_stats(task: Task, chain: MemberRunner, now: float, sched_now: float | None = None,
                 running: tuple[float, float] = IDLE) -> list[OperatorStats]:
    """One snapshot per member of a fused chain (a joined source first: runtime.sourced), as if each ran alone.

    Tuple counts are each member's own (counted per batch). The task's busy and CPU
    seconds are shared out in proportion to the members' stage times
    (:meth:`FusedChain.counters`: timed per batch, or for composed Maps sampled
    and extrapolated), so the members add up to the task; with none timed yet, evenly.
    Rates scale with each member's share of the chain's input (output). The first
    member has the chain's input port and read waits, the last its output side;
    the ports between members are calls, shown as always-empty ports that passed
    every tuple. Each member keeps its own kind. A chain that ends in a sink writes nowhere, so its
    members' write rates scale from the chain's read rate instead.
    """
    whole = operator_stats(task, now, sched_now, running)
    names, n = chain.names, len(chain.names)
    tuples_in, tuples_out, stage_s = chain.counters()
    timed = sum(stage_s)
    shares = [s / timed for s in stage_s] if timed > 0 else [1.0 / n] * n
    # The chain's input: its head's, or what a joined source produced (a source takes nothing in).
    fed, tail_out = tuples_in[0] or tuples_out[0], tuples_out[-1]
    out = []
    for i, name in enumerate(names):
        first, last = i == 0, i == n - 1
        inputs = _renamed_ports(whole.inputs, name) if first else (_inner_port(task, chain, name, tuples_in[i]),)
        write_rate = (_scaled(whole.write_rate, tuples_out[i], tail_out) if tail_out
                      else _scaled(whole.read_rate, tuples_out[i], fed))
        out.append(replace(
            whole, name=name, kind=chain.kinds[i], busy_s=whole.busy_s * shares[i], cpu_s=whole.cpu_s * shares[i],
            tuples_in=tuples_in[i], tuples_out=tuples_out[i],
            read_rate=_scaled(whole.read_rate, tuples_in[i], fed), write_rate=write_rate,
            read_blocked_s=whole.read_blocked_s if first else 0.0,
            write_blocked_s=whole.write_blocked_s if last else 0.0,
            output_write_blocked_ratio=whole.output_write_blocked_ratio if last else 0.0,
            inputs=inputs, malformed=chain.views[i].malformed if chain.views else 0,
            sent=whole.sent if last else {names[i + 1]: tuples_out[i]},
            key_group_load=chain.members[i].key_group_load()))
    return out


def _scaled(rate: float, part: int, whole: int) -> float:
    """``rate`` in proportion ``part / whole`` (0 when nothing passed yet)."""
    return rate * part / whole if whole else 0.0


def _renamed_ports(ports: tuple[PortStats, ...], name: str) -> tuple[PortStats, ...]:
    return tuple(replace(p, operator=name) for p in ports)


def _inner_port(task: Task, chain: MemberRunner, name: str, passed: int) -> PortStats:
    """The port between two members of a chain: a call, never holding a tuple (shown with the chain's
    input capacity, or for a joined source the capacity its chain's port would have had)."""
    capacity = task.inputs[0].capacity if task.inputs else getattr(chain, "entry_capacity", 0)
    return PortStats(operator=name, port=0, size=0, capacity=capacity, max_size=0, writes=passed, reads=passed,
                     dropped=0, closed=task.state.value == "completed", publishers=1, write_blocked_ratio=0.0,
                     front_wait_s=0.0)


def take_snapshot(sched: Scheduler, pool: WorkerPool, started: float, policy_name: str) -> FlowStats:
    """Snapshot of a whole running (or finished) flow, activations in progress counted up to now."""
    now, sched_now = perf_counter(), sched.now()
    running: dict[Task, tuple[float, float]] = {}
    workers = []
    for w in pool.workers:
        task, busy, cpu = w.in_progress(sched_now)
        if task is not None:
            before = running.get(task, IDLE)
            running[task] = (before[0] + busy, before[1] + cpu)
        life = (w.ended or now) - w.started
        workers.append(WorkerStats(index=w.index, alive=w.alive, busy_s=w.busy_s + busy, idle_s=w.idle_s,
                                   alive_s=life, dispatches=w.dispatches,
                                   utilisation=(w.busy_s + busy) / life if life > 0 else 0.0, cpu_s=w.cpu_s + cpu))
    return FlowStats(
        elapsed_s=now - started, threads=pool.target, policy=policy_name,
        operators={s.name: s for t in sched.tasks for s in task_stats(t, now, sched_now, running.get(t, IDLE))},
        workers=tuple(workers),
    )
