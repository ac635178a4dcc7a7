"""Fuse and un-fuse chains of a running flow (threads backend): :class:`Regrouper`.

Role: the threads backend's mechanism for the :class:`~elastream.runtime.decisions.Fuse`
and :class:`~elastream.runtime.decisions.Unfuse` decisions. A *regroup* replaces
consecutive tasks of a chain of fusable operators (each a fused chain or one
operator) by other tasks over the same operators, grouped differently:

* ``Unfuse(chain)`` names a running fused chain. It is replaced by the chains
  :func:`~elastream.runtime.fusion.find_chains` would fuse at the pool's current
  thread count (at several threads a member bound to one worker runs alone, so
  its neighbours can run beside it); when that count would fuse the whole chain
  again, by its members one by one.
* ``Fuse(chain)`` names consecutive operators whose tasks cover it exactly; they
  become one task.

The safe point. The old tasks are *held*: taken out of the ready set and never
dispatched (:attr:`Scheduler.held`), and the reconfiguring thread waits on
:attr:`Scheduler.settled` (every release notifies it while a regroup runs)
until no worker is inside them. Then, under the scheduler's lock, the new tasks
take the chain's input buffer and the last task's output buffers, with what it
had not delivered yet as their pending output, so no tuple is lost, duplicated
or reordered. What waits *inside* a chain being fused (the buffers between the
old tasks, what each had not delivered) is handled one of two ways:

* the new task takes one worker at a time (one thread, or a member bound to one
  worker): it is a :class:`~elastream.runtime.refuse_inflight.CarryingTask`,
  which first runs those tuples, each from its member on, oldest first, before
  its input (no wait for a drain);
* the new task is shared by several workers (it numbers its input batches as it
  takes them, so nothing may come first): only the head is held, its undelivered
  outputs are pushed into the next buffer, and the tasks behind it run on until
  every inner buffer is empty (the chain *drains*, then fuses).

A chain still running what it carried is regrouped once that has run. A regroup
that cannot reach its safe point within :data:`REGROUP_TIMEOUT_S`, or meets the
end of the stream or a shutdown, changes nothing and says why.

What carries over: every member keeps its operator instance (opened once), the
context it was opened with (now reading its new task through the member's view)
and its statistics: each new task starts from the counts, busy and CPU seconds
its members had (:func:`~elastream.runtime.snapshot.task_stats`), so per-member
counts never go backwards. A lone member runs as a chain of one, so its counters
and error naming stay those of a chain member. (An operator that was fused and
becomes a chain's inner member shows no blocked seconds any more: only a task's
ends wait.)

Threading: :meth:`Regrouper.apply` is called from the thread that submits
decisions (the elastic loop's), one regroup at a time; it waits only on the
scheduler's condition, with a timeout. Workers run on meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING

from elastream.operators.base import Operator
from elastream.operators.spec import OperatorSpec
from elastream.runtime.allotment import wants_allotment
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.compile import make_task, relink
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.decisions import Fuse, Unfuse
from elastream.runtime.fusion import (FusedChain, _MemberView, chain_spec, find_chains, fusable, fused_chain,
                                      fused_name, member_names)
from elastream.runtime.ready import add_ready
from elastream.runtime.snapshot import task_stats
from elastream.runtime.states import OperatorState
from elastream.runtime.refuse_inflight import (CarryingTask, has_undelivered, release_refused, take_inside,
                                               take_undelivered)

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow
    from elastream.metrics.stats import OperatorStats
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task
    from elastream.runtime.workers import WorkerPool

#: The longest a regroup waits for its safe point (a worker to leave the chain, or the chain to drain):
#: a few elastic periods. A chain whose end waits on something its held head feeds (a join downstream
#: that also needs the head's upstream's other output) cannot drain; the Fuse is then refused.
REGROUP_TIMEOUT_S = 2.0

_DONE = OperatorState.COMPLETED
_READ_BLOCKED = OperatorState.READ_BLOCKED


class RegroupRefused(Exception):
    """A regroup that cannot be made now; its text says why (it becomes ``Applied.why``)."""


@dataclass(frozen=True, slots=True)
class RunLayout:
    """What a regroup needs of the compiled run to make tasks again (read-only)."""

    flow: Flow
    instances: dict[str, Operator]
    specs: dict[str, OperatorSpec]
    max_queue_size: int
    batch_size: int
    reorder: str
    partitioning: str


class Regrouper:
    """Applies Fuse and Unfuse to the tasks of one running flow; :attr:`chains` are the chains fused now."""

    def __init__(self, sched: Scheduler, pool: WorkerPool, layout: RunLayout, fused: Sequence[tuple[str, ...]]):
        self.sched = sched
        self.pool = pool
        self.layout = layout
        self.chains: tuple[tuple[str, ...], ...] = tuple(fused)
        self._order = {name: i for i, name in enumerate(layout.flow.operators)}
        self._one_at_a_time = threading.Lock()

    def apply(self, decision: Fuse | Unfuse) -> tuple[bool, str]:
        """Apply one decision: ``(ok, why)``; ``why`` is empty when it took effect as asked."""
        with self._one_at_a_time:
            try:
                if isinstance(decision, Unfuse):
                    old, groups = self._plan_unfuse(tuple(decision.chain))
                else:
                    old, groups = self._plan_fuse(tuple(decision.chain))
                    if len(old) == 1:
                        return True, "the chain already runs as one task"
                self._regroup(old, groups)
            except RegroupRefused as refused:
                return False, str(refused)
        return True, ""

    # -- planning ----------------------------------------------------------------------------------
    def _plan_unfuse(self, chain: tuple[str, ...]) -> tuple[list[Task], list[tuple[str, ...]]]:
        task = next((t for t in self.sched.tasks if len(member_names(t)) > 1 and member_names(t) == chain), None)
        if task is not None and fused_chain(task) is None:  # a source joined to its chain (runtime.sourced)
            raise RegroupRefused(f"{' → '.join(chain)} runs as one task with its source (the manual model); "
                                 "it cannot be un-fused")
        if task is None or fused_chain(task) is None:
            running = ", ".join(" → ".join(c) for c in self.chains) or "none"
            raise RegroupRefused(f"no running fused chain is {' → '.join(chain)} (fused now: {running})")
        if any(n not in self.layout.instances for n in chain):
            raise RegroupRefused(f"{' → '.join(chain)} is one operator of the flow (a replication unit)")
        return [task], self.split(chain, self.pool.target)

    def split(self, chain: tuple[str, ...], threads: int) -> list[tuple[str, ...]]:
        """The groups ``chain`` becomes at ``threads``: what find_chains fuses there, else one member each."""
        layout = self.layout
        inside = set(chain)
        parts = [p for c in find_chains(layout.flow, layout.specs, layout.instances, threads)
                 if len(p := tuple(n for n in c if n in inside)) > 1]
        if parts == [chain]:
            parts = []                             # the count would fuse it all again: un-fuse it fully
        head = {p[0]: p for p in parts}
        groups: list[tuple[str, ...]] = []
        i = 0
        while i < len(chain):
            group = head.get(chain[i], (chain[i],))
            groups.append(group)
            i += len(group)
        return groups

    def _plan_fuse(self, chain: tuple[str, ...]) -> tuple[list[Task], list[tuple[str, ...]]]:
        task_of = {name: t for t in self.sched.tasks for name in member_names(t)}
        missing = [n for n in chain if n not in task_of or n not in self.layout.instances]
        if missing or len(chain) < 2:
            raise RegroupRefused(f"cannot fuse {' → '.join(chain)}: "
                                 + (f"no operator {missing[0]!r} runs" if missing else "a chain needs two operators"))
        tasks: list[Task] = []
        for name in chain:
            if not tasks or tasks[-1] is not task_of[name]:
                tasks.append(task_of[name])
        if tuple(n for t in tasks for n in member_names(t)) != chain:
            apart = [" → ".join(member_names(t)) for t in tasks if not set(member_names(t)) <= set(chain)]
            raise RegroupRefused(f"cannot fuse {' → '.join(chain)}: its operators are not whole tasks in flow order"
                                 + (f" ({apart[0]} runs as one task)" if apart else ""))
        self._check_fusable(chain, tasks)
        return tasks, [chain]

    def _check_fusable(self, chain: tuple[str, ...], tasks: list[Task]) -> None:
        layout = self.layout
        for name in chain:
            if not fusable(layout.instances[name], layout.specs[name]):
                raise RegroupRefused(f"cannot fuse {' → '.join(chain)}: {name!r} is not a stateless function "
                                     "operator with one input and one output")
        for a, b in zip(tasks, tasks[1:]):
            if len(b.inputs) != 1 or a.outputs != [[b.inputs[0]]] or b.inputs[0].publishers != [a]:
                raise RegroupRefused(f"cannot fuse {' → '.join(chain)}: {member_names(a)[-1]!r} → "
                                     f"{member_names(b)[0]!r} is not the only link out of one and into the other")

    # -- the safe point ----------------------------------------------------------------------------
    def _regroup(self, old: list[Task], groups: list[tuple[str, ...]]) -> None:
        """Hold the chain, reach the safe point, swap the tasks (all under the scheduler's lock).

        A Fuse into a task of one worker holds every old task and carries what was inside the
        chain into the new task (no drain); into a shared task (several threads) it holds the head
        and lets the chain drain, since a shared task numbers its input batches as it takes them.
        """
        sched = self.sched
        carry = len(old) > 1 and not self._shared(groups[0])
        held = old if carry or len(old) == 1 else old[:1]
        with sched.lock:
            sched.regrouping = True
            swapped = False
            try:
                # A chain fused a moment ago may still run what it carried: that goes first.
                self._wait(lambda: not any(isinstance(t, CarryingTask) and t.is_carrying() for t in old),
                           "it to run what it carried when it fused")
                for t in held:
                    sched.held.add(t)
                    sched.ready.pop(t, None)
                self._wait(lambda: not any(t.workers for t in held), "a worker to leave it")
                self._check_can_regroup(old, quiescent=held)
                if len(old) > 1 and not carry:
                    self._push_on(old[0])
                    self._wait(lambda: self._drained(old), "the buffers inside it to drain")
                    self._check_can_regroup(old, quiescent=old)
                self._swap(old, groups, take_inside(old) if carry else [])
                swapped = True
            finally:
                self._release(held, swapped)

    def _shared(self, group: tuple[str, ...]) -> bool:
        """Would the task of ``group`` be shared by several workers at the pool's current count?"""
        return wants_allotment(chain_spec([self.layout.specs[n] for n in group]), self.pool.target)

    def _release(self, held: list[Task], swapped: bool) -> None:
        """End the hold (lock held); tasks made ready while held become eligible again."""
        sched = self.sched
        for t in held:
            sched.held.discard(t)
            if not swapped and t.state is OperatorState.READY:
                add_ready(sched.ready, t)
        sched.regrouping = False
        sched.cond.notify_all()

    def _wait(self, reached: Callable[[], bool], what: str) -> None:
        """Wait (lock held, released while waiting) until ``reached()``; refuse on shutdown or timeout."""
        sched = self.sched
        deadline = perf_counter() + REGROUP_TIMEOUT_S
        while not reached():
            if sched.shutdown_requested or sched.finished.is_set():
                raise RegroupRefused("the run is shutting down")
            left = deadline - perf_counter()
            if left <= 0:
                raise RegroupRefused(f"no safe point: waited {REGROUP_TIMEOUT_S} s for {what}")
            sched.settled.wait(left)
        if sched.shutdown_requested:
            raise RegroupRefused("the run is shutting down")

    def _check_can_regroup(self, old: list[Task], quiescent: list[Task]) -> None:
        """Refuse a chain that ended its stream, or whose parts did not all start yet (lock held).

        The ``quiescent`` tasks (no worker inside) release what their reorder buffer holds.
        """
        for t in old:
            if t.state is _DONE or getattr(t, "_inputs_done", False):
                raise RegroupRefused(f"{' → '.join(member_names(t))} has reached the end of its stream")
            if t.opened != old[0].opened:
                raise RegroupRefused("not every part of the chain has started yet")
        for t in quiescent:
            if t.shared and not release_refused(t):
                raise RegroupRefused(f"{t.name} still has outputs it cannot release in order")

    def _drained(self, old: list[Task]) -> bool:
        """Every buffer inside the chain empty, no worker inside it, nothing undelivered but at its end."""
        for k, t in enumerate(old):
            if k and (t.workers or t.inputs[0].count):
                return False
            if k < len(old) - 1 and has_undelivered(t):
                return False
        return True

    def _push_on(self, head: Task) -> None:
        """Deliver what the held head produced into the next buffer (beyond its capacity if need be)."""
        now = self.sched.now()
        for buf, items, origin in take_undelivered(head):
            buf.force(items, origin, now)
            if buf.owner.state is _READ_BLOCKED:
                self.sched.make_ready_locked(buf.owner)

    # -- the swap (lock held) ------------------------------------------------------------------------
    def _swap(self, old: list[Task], groups: list[tuple[str, ...]], carry: list[tuple[int, list, float]]) -> None:
        sched = self.sched
        pending = take_undelivered(old[-1])     # first: what it counts as emitted now is in the statistics
        stats = {s.name: s for t in old for s in task_stats(t, perf_counter())}
        members = _member_contexts(old, self.pool.contexts)
        new = [self._make_task(g, stats, members, old[0].opened, carry) for g in groups]
        self._wire(old, new, stats)
        new[-1].pending = pending
        for t in old:
            sched.forget_locked(t)
            t.state = _DONE                      # retired: nothing refers to it any more
            self.pool.contexts.pop(t.name, None)
        for t in new:
            self.pool.contexts[t.name] = _task_context(t)
            if t.opened:
                t.context = self.pool.contexts[t.name]
        at = sched.tasks.index(old[0])
        sched.tasks = sched.tasks[:at] + new + [t for t in sched.tasks[at:] if t not in old]
        sched.live += len(new) - len(old)
        relink(sched.tasks)
        for t in new:
            add_ready(sched.ready, t)
        sched.cond.notify_all()
        self.chains = self._chains_after(old, groups)

    def _make_task(self, group: tuple[str, ...], stats: dict[str, OperatorStats],
                   members: dict[str, tuple[_MemberView, Context]], opened: bool,
                   carry: list[tuple[int, list, float]]) -> Task:
        """The task of one group: a chain (of one member or more) starting from its members' statistics."""
        layout = self.layout
        chain = FusedChain(group, [layout.instances[n] for n in group], [layout.specs[n] for n in group])
        name, index = fused_name(group), self._order[group[0]]
        if carry:
            task: Task = CarryingTask(name, chain, index, layout.batch_size, chain.spec(), carry)
        else:
            task = make_task(name, chain, index, batch_size=layout.batch_size, threads=self.pool.target,
                             reorder=layout.reorder, partitioning=layout.partitioning, spec=chain.spec())
        task.sched, task.now = self.sched, self.sched.now
        for name in group:
            members[name][0]._task = task          # the member's context now reads this task
        chain.views = tuple(members[n][0] for n in group)
        chain._contexts = tuple(members[n][1] for n in group)
        _seed(task, chain, [stats[n] for n in group])
        if opened:
            chain._now = self.sched.now
            chain._opened = len(group)
            chain.bind_stages()
            task.opened = True
        return task

    def _wire(self, old: list[Task], new: list[Task], stats: dict[str, OperatorStats]) -> None:
        """The chain's input buffer to the first new task, a new buffer between new tasks, its outputs to the last."""
        entry = old[0].inputs[0]
        entry.owner = new[0]
        new[0].inputs = [entry]
        for a, b in zip(new, new[1:]):
            first = member_names(b)[0]
            buf = PortBuffer(b, 0, max(self.layout.max_queue_size, b.spec.input_capacity), f"{first}.in_(0)")
            buf.capacity = max(buf.capacity, a.spec.output_capacity)
            buf.writes = buf.reads = stats[first].tuples_in   # the port it replaces passed these
            buf.publishers.append(a)
            buf.open_publishers = 1
            b.inputs = [buf]
            a.outputs[0].append(buf)
            a.sent[buf] = stats[member_names(a)[-1]].tuples_out
        last, end = new[-1], old[-1]
        last.outputs = end.outputs
        last.sent = dict(end.sent)
        for buf in (b for subs in end.outputs for b in subs):
            buf.publishers = [last if p is end else p for p in buf.publishers]

    def _chains_after(self, old: list[Task], groups: list[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
        gone = {member_names(t) for t in old}
        chains = [c for c in self.chains if c not in gone] + [g for g in groups if len(g) > 1]
        return tuple(sorted(chains, key=lambda c: self._order[c[0]]))


def _seed(task: Task, chain: FusedChain, stats: list[OperatorStats]) -> None:
    """Start ``task`` and its chain from the members' statistics so far: counts continue, never go back.

    The chain's stage seconds start at each member's busy seconds, and the task's busy seconds at
    their sum, so each member's share of the task's time is exactly its own at the switch.
    """
    chain._in = [s.tuples_in for s in stats]
    chain._out = [s.tuples_out for s in stats]
    chain._s = [s.busy_s for s in stats]
    task.busy_s = sum(s.busy_s for s in stats)
    task.cpu_s = sum(s.cpu_s for s in stats)
    task.activations = max(s.activations for s in stats)
    task.tuples_in, task.tuples_out = stats[0].tuples_in, stats[-1].tuples_out
    task.read_blocked_s, task.write_blocked_s = stats[0].read_blocked_s, stats[-1].write_blocked_s


def _member_contexts(old: list[Task], contexts: dict[str, Context]) -> dict[str, tuple[_MemberView, Context]]:
    """Each member's view and the context it was (or will be) opened with.

    A chain's members keep theirs. An operator that ran as its own task keeps the context
    it was opened with, which from now on reads its task through a member view.
    """
    out: dict[str, tuple[_MemberView, Context]] = {}
    for t in old:
        chain = fused_chain(t)
        if chain is not None and chain.views:
            out.update((n, (v, c)) for n, v, c in zip(chain.names, chain.views, chain._contexts))
            continue
        view = _MemberView(t, t.name)
        view.malformed = t.malformed
        ctx = contexts.get(t.name)
        if t.opened and ctx is not None:
            ctx._task = view
        else:
            ctx = Context(view, [], [])  # type: ignore[arg-type]
        out[t.name] = (view, ctx)
    return out


def _task_context(task: Task) -> Context:
    inputs = [InputPort(b, task, i) for i, b in enumerate(task.inputs)]
    return Context(task, inputs, [OutputPort(task, i) for i in range(len(task.outputs))])
