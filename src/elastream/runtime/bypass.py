"""Replicated units that run unreplicated until the first replica joins: :class:`Bypasses`.

Role: the engine's mechanism behind the replicas an elastic run holds ready
(:mod:`elastream.elastic.held`). Such a unit is compiled with its ordered
split, its replica 0 and its merge, so replicas in other processes can join
without a restart; but while replica 0 alone takes work, the split and the
merge only add two activations per batch, which a light, latency-bound flow
pays on every tuple. So the unit starts *bypassed*: one more task, named after
the unit, runs the operator replica 0 holds (the same instance, so its state is
the replica's) straight from the unit's producer to its consumer, as a
one-process run would. The split, the replica and the merge wait, read-blocked
on empty inputs, costing nothing.

* The first time the unit must spread (:meth:`Bypasses.splice`, on the first
  ``SetReplicas`` above one), the bypass stops at a safe point: it is held and
  no worker is inside it. The bypass has read the split's own input buffer all
  along (borrowed from the split, which waited on an empty one), so the split
  takes it back with whatever waits there, and the producers, their pending
  tuples and their waits stay as they are. What the bypass had not delivered
  goes to the consumer before anything the merge sends, and the merge takes
  over the consumer's buffer. From then on the split, the replicas and the
  merge run as built, the split numbering from its first batch.
* A unit can instead move whole into the process of one of its replicas
  (:meth:`Bypasses.move`, on a ``SetReplicas`` naming that one replica alone): the
  ring sender that carried the split's pieces to that replica reads the unit's
  input buffer from then on, as a static run's sender would, and the ring
  receiver that brought the replica's results to the merge feeds the unit's
  consumer; the replica runs as the operator itself (its first message says so).
  No split, merge or piece is left on the way: a process whose units all moved
  whole runs as a static plan of whole units would. The split, replica 0 and the
  merge end with nothing; the unit cannot spread again.
* A bypass that reaches the end of its input has ended the unit: its end
  outputs went to the consumer. Its completion closes the split's input, so
  the split, the replicas (those held in other processes too) and the merge
  end with nothing, and replica 0 is told not to repeat the end outputs
  (``end_handled``).

The replica operator offers ``bypass_operator()`` (the instance the bypass
runs) and ``end_handled()``; the ordered replica does (:mod:`elastream.ordered.replica`).
A split that offers ``took_over(replica)`` hears of the splice before it runs
(the ordered split learns the keys the bypass saw first, in their order).

Threading: :meth:`Bypasses.install` runs in the thread that starts the run,
before the scheduler exists; :meth:`Bypasses.splice` in the thread that applies
decisions (the control point), waiting on the scheduler's condition with a
timeout; the completion hook runs under the scheduler's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter, sleep
from typing import TYPE_CHECKING, Any

from elastream.operators.base import FunctionOperator, Operator
from elastream.runtime.buffer import PortBuffer
from elastream.runtime.compile import make_task, relink
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.ready import add_ready
from elastream.runtime.states import OperatorState

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.compile import CompiledFlow
    from elastream.runtime.scheduler import Scheduler
    from elastream.runtime.task import Task

#: Longest wait for a bypass and its producers to be outside every worker before a splice gives up.
SPLICE_TIMEOUT_S = 2.0
#: Longest wait for the process a unit moves to to start its part (a held worker boots in about 0.1-0.5 s).
MOVE_TIMEOUT_S = 5.0
#: How often a move looks whether that process has started.
PEER_POLL_S = 0.005


@dataclass(frozen=True, slots=True)
class BypassSpec:
    """Names of a held unit's tasks in this part: the unit, its split, its replica 0 and its merge."""

    unit: str
    split: str
    replica: str
    merge: str


class _SharedOperator(FunctionOperator):
    """The operator a bypass runs: replica 0's own instance, opened and closed by replica 0's task."""

    def __init__(self, inner: Operator, replica: Task, replica_context: Context):
        super().__init__(inputs=1, outputs=1)
        self.inner = inner
        self.kind = inner.spec().kind
        self._replica, self._replica_context = replica, replica_context
        self.on_batch = inner.on_batch  # type: ignore[method-assign]
        self.on_inputs_closed = inner.on_inputs_closed  # type: ignore[method-assign]

    def spec(self) -> Any:
        return self.inner.spec()

    def open(self, ctx: Any) -> None:
        # Replica 0 waits read-blocked until a splice or the end, so it cannot be opening now.
        if not self._replica.opened:
            self._replica_context.use_clock(ctx.clock)
            self._replica.open(self._replica_context)

    def close(self) -> None:
        """Replica 0's task closes the operator when it ends."""

    def describe(self) -> str:
        return self.inner.describe()


@dataclass(slots=True)
class _Bypass:
    """One bypassed unit: its bypass task, the unit's tasks, and the buffers the bypass borrows."""

    spec: BypassSpec
    task: Task
    split: Task
    split_context: Context
    replica: Task
    merge: Task
    consumer_buf: PortBuffer   # the consumer's input, fed by the bypass now and by the merge after a splice
    split_capacity: int        # the split's input capacity, given back with its buffer
    consumer_capacity: int     # the consumer's input capacity as the merge needs it, given back at a splice
    spliced: bool = False
    moved_to: int | None = None  # the replica now running the unit whole (Bypasses.move)


class Bypasses:
    """The bypassed units of one running part (see the module docstring)."""

    def __init__(self, bypasses: dict[str, _Bypass], contexts: dict[str, Context] | None = None):
        self._by_unit = bypasses
        self.sched: Scheduler | None = None
        self._contexts = contexts if contexts is not None else {}

    @classmethod
    def install(cls, compiled: CompiledFlow, specs: Sequence[BypassSpec], batch_size: int,
                max_queue_size: int) -> Bypasses:
        """Add a bypass task for each unit of ``specs`` whose split, replica and merge this part runs."""
        by_name = {t.name: t for t in compiled.tasks}
        bypasses = {}
        for spec in specs:
            if all(name in by_name for name in (spec.split, spec.replica, spec.merge)):
                bypass = _bypass(compiled, spec, by_name, batch_size, max_queue_size)
                if bypass is not None:
                    bypasses[spec.unit] = bypass
        if bypasses:
            relink(compiled.tasks)
        return cls(bypasses, compiled.contexts)

    def attach(self, sched: Scheduler) -> None:
        """Leave the split, replica 0 and merge read-blocked, and hook each bypass's end (after the scheduler)."""
        self.sched = sched
        with sched.lock:
            for b in self._by_unit.values():
                for task in (b.split, b.replica, b.merge):
                    sched.park_locked(task)
                sched.on_completed[b.task] = lambda b=b: self._ended(b)

    def bypassed(self, unit: str) -> bool:
        """True while ``unit`` runs through its bypass."""
        b = self._by_unit.get(unit)
        return b is not None and not b.spliced

    def moved_to(self, unit: str) -> int | None:
        """The replica that runs ``unit`` whole since :meth:`move` (None: it did not move)."""
        b = self._by_unit.get(unit)
        return None if b is None else b.moved_to

    def splice(self, unit: str, timeout: float = SPLICE_TIMEOUT_S) -> tuple[bool, str, float]:
        """Put the split, replica 0 and merge of ``unit`` in its bypass's place (nothing to do unless bypassed).

        Returns (done, why not, pause): the pause is how long the unit's stream stood still, from the
        bypass's last step to the splice — not the wait for that step to end, while the stream still flows.
        """
        b = self._by_unit.get(unit)
        if b is None or b.spliced:
            return True, "", 0.0
        return self._at_safe_point(b, (b.task,), perf_counter() + timeout, lambda: _splice_locked(self.sched, b))

    def move(self, unit: str, replica: int, timeout: float = MOVE_TIMEOUT_S) -> tuple[bool, str, float]:
        """Run bypassed ``unit`` whole where its replica ``replica`` runs, in another process (see the module
        docstring). Returns (done, why not, how long the unit's stream stood still)."""
        b = self._by_unit.get(unit)
        if b is None or b.spliced:
            return False, f"{unit!r} does not run through its bypass any more", 0.0
        sender, receiver = _ring_ends(b, replica)
        if sender is None or receiver is None:
            return False, f"replica {replica} of {unit!r} does not run in another process", 0.0
        deadline = perf_counter() + timeout
        if not _wait_for_peer(sender, deadline, self.sched):
            return False, f"the process of replica {replica} of {unit!r} is still starting", 0.0
        return self._at_safe_point(b, (b.task, sender, receiver), deadline,
                                   lambda: _move_locked(self.sched, b, sender, receiver, replica, self._contexts))

    def _at_safe_point(self, b: _Bypass, quiet: tuple[Task, ...], deadline: float,
                       rewire: Callable[[], None]) -> tuple[bool, str, float]:
        """Hold ``quiet`` (the bypass first), wait until no worker is inside any of them, ``rewire`` under the
        scheduler's lock, then let them go: (done, why not, how long the unit's stream stood still)."""
        sched = self.sched
        with sched.lock:
            sched.held.update(quiet)
            sched.regrouping = True
            try:
                while any(task.state is OperatorState.RUNNING for task in quiet):
                    left = deadline - perf_counter()
                    if left <= 0 or sched.shutdown_requested:
                        return False, _why_not(b, sched), 0.0
                    sched.settled.wait(left)
                stopped = perf_counter()
                if b.task.state is OperatorState.COMPLETED or sched.shutdown_requested:
                    return False, _why_not(b, sched), 0.0
                rewire()
                relink(sched.tasks)
            finally:
                sched.held.difference_update(quiet)
                sched.regrouping = False
                for task in quiet:
                    if task.state is OperatorState.READY:
                        add_ready(sched.ready, task)
                sched.cond.notify_all()
        return True, "", perf_counter() - stopped

    def _ended(self, b: _Bypass) -> None:
        """The bypass completed (lock held): end the split and merge with nothing, unless it was spliced."""
        if b.spliced:
            return
        end_handled = getattr(b.replica.op, "end_handled", None)
        if end_handled is not None and not self.sched.shutdown_requested:
            end_handled()
        # Its one stand-in publisher ends: the split ends, then its replicas (held ones too), then the merge.
        self.sched.publisher_ended_locked(b.split.inputs[0])


def _bypass(compiled: CompiledFlow, spec: BypassSpec, by_name: dict[str, Task], batch_size: int,
            max_queue_size: int) -> _Bypass | None:
    """Create the bypass task of ``spec``: it reads the split's input buffer and writes the merge's consumer's.

    The buffer holds what the bypass's own input would while lent: a split's input holds two of its
    largest pieces (8,192 tuples), which lets the source run that far ahead of a one-thread flow, with
    that many live tuples falling out of the CPU's caches.
    """
    split, replica, merge = by_name[spec.split], by_name[spec.replica], by_name[spec.merge]
    inner_of = getattr(replica.op, "bypass_operator", None)
    if inner_of is None or len(split.inputs) != 1 or len(merge.outputs) != 1 or len(merge.outputs[0]) != 1:
        return None
    op = _SharedOperator(inner_of(), replica, compiled.contexts[spec.replica])
    task = make_task(spec.unit, op, split.index, batch_size=batch_size, threads=1, reorder="nonblocking",
                     partitioning="hybrid", spec=op.spec())
    split_in, consumer_buf = split.inputs[0], merge.outputs[0][0]
    split_capacity, consumer_capacity = split_in.capacity, consumer_buf.capacity
    split_in.capacity = min(split_capacity, max(max_queue_size, task.spec.input_capacity))
    # The merge's consumer holds a whole release of parked batches (merge.MERGE_OUTPUT_CAPACITY); fed by
    # the bypass it holds what the operator's own consumer would, or the bypass, never blocked, would
    # take a thread from a slower consumer (a Union of several branches) for as long as that buffer fills.
    consumer_buf.capacity = min(consumer_capacity, max(max_queue_size, consumer_buf.owner.spec.input_capacity))
    task.inputs = [split_in]
    split_in.owner = task
    split.inputs = [_waiting_buffer(split, split_in)]
    task.outputs = [[consumer_buf]]
    merge.outputs[0] = []
    consumer_buf.publishers = [task if p is merge else p for p in consumer_buf.publishers]
    compiled.tasks.append(task)
    compiled.contexts[task.name] = Context(task, [InputPort(split_in, task, 0)], [OutputPort(task, 0)])
    return _Bypass(spec, task, split, compiled.contexts[spec.split], replica, merge, consumer_buf, split_capacity,
                   consumer_capacity)


def _waiting_buffer(split: Task, lent: PortBuffer) -> PortBuffer:
    """An empty input for the split while the bypass borrows its own: open (one publisher nobody is)
    until the bypass ends or is spliced."""
    buf = PortBuffer(split, 0, lent.capacity, f"{split.name}.in_(0) (bypassed)")
    buf.open_publishers = 1
    return buf


def _splice_locked(sched: Scheduler, b: _Bypass) -> None:
    """Rewire a quiescent bypass back to its split, replica and merge (lock held)."""
    b.spliced = True  # before the bypass completes: its completion hook must not end the split
    lent, waiting = b.task.inputs[0], b.split.inputs[0]
    lent.owner, lent.capacity = b.split, b.split_capacity
    b.split.inputs = [lent]
    b.split_context.inputs[0] = InputPort(lent, b.split, 0)  # the split has not run: its coroutine reads this
    b.task.inputs = [waiting]
    waiting.owner, waiting.open_publishers, waiting.closed = b.task, 0, True
    b.merge.outputs[0] = [b.consumer_buf]
    b.consumer_buf.capacity = b.consumer_capacity
    undelivered = _hand_consumer_to(sched, b, b.merge)
    took_over = getattr(b.split.op, "took_over", None)
    if took_over is not None:
        took_over(b.replica.op)  # e.g. the keys' first-seen order so far, which only the bypass saw
    _complete(sched, b)
    sched.make_ready_locked(b.split)
    _wake_consumer(sched, b, undelivered)


def _hand_consumer_to(sched: Scheduler, b: _Bypass, publisher: Task) -> bool:
    """Give the bypass's consumer what the bypass had not delivered, then ``publisher`` in the bypass's place
    (its output list must already hold the consumer's buffer); True when something was undelivered."""
    undelivered, b.task.pending = b.task.pending, []
    for _, items, origin in undelivered:
        b.consumer_buf.force(items, origin, sched.now())
    b.task.outputs = [[]]
    b.consumer_buf.publishers = [publisher if p is b.task else p for p in b.consumer_buf.publishers]
    return bool(undelivered)


def _complete(sched: Scheduler, b: _Bypass) -> None:
    """Mark the replaced bypass completed (its shared operator's close does nothing: replica 0 closes it)."""
    sched.complete_locked(b.task)
    if b.task.opened:
        b.task.close()


def _wake_consumer(sched: Scheduler, b: _Bypass, undelivered: bool) -> None:
    """Let the consumer take what the bypass had not delivered, should it be waiting for input."""
    if undelivered and b.consumer_buf.owner.state is OperatorState.READ_BLOCKED:
        sched.make_ready_locked(b.consumer_buf.owner)


def _ring_ends(b: _Bypass, replica: int) -> tuple[Task | None, Task | None]:
    """The ring ends of ``replica`` in this part: the sender its split output feeds (it offers ``carry_whole``
    and ``peer_started``), and the ring receiver among the merge's publishers that carries that replica's
    outputs (both name it as their ``peer``)."""
    outs = b.split.outputs
    if not 0 < replica < len(outs) or len(outs[replica]) != 1:
        return None, None
    sender = outs[replica][0].owner
    peer = getattr(sender.op, "peer", None)
    receivers = [t for t in b.merge.inputs[0].publishers if hasattr(t.op, "ring_name") and t.op.peer == peer]
    if not hasattr(sender.op, "carry_whole") or not peer or len(receivers) != 1:
        return None, None
    return sender, receivers[0]


def _wait_for_peer(sender: Task, deadline: float, sched: Scheduler) -> bool:
    """Wait, outside the lock, until the process on the other end of ``sender`` has started its part: moved
    there before, the unit's stream would stand still for as long as that process boots (a worker held
    ready starts with the decision that moves a unit to it)."""
    started = sender.op.peer_started
    while not started():
        if perf_counter() >= deadline or sched.shutdown_requested:
            return False
        sleep(PEER_POLL_S)
    return True


def _move_locked(sched: Scheduler, b: _Bypass, sender: Task, receiver: Task, replica: int,
                 contexts: dict[str, Context]) -> None:
    """Rewire a quiescent bypass to the ring ends of ``replica`` (lock held; see :meth:`Bypasses.move`)."""
    b.spliced, b.moved_to = True, replica  # before the bypass completes: its completion must not end the split
    lent, old = b.task.inputs[0], sender.inputs[0]
    b.split.outputs[replica] = []
    old.publishers = [p for p in old.publishers if p is not b.split]
    old.open_publishers, old.closed = 0, True  # the sender's wait on it ends: carry_whole has it wait on lent
    lent.owner, sender.inputs = sender, [lent]
    contexts[sender.name].inputs[0].read_from(lent)  # the port its running coroutine holds
    sender.op.carry_whole(lent.capacity)  # the ring holds about what the unit's input port holds
    b.task.inputs = [_waiting_buffer(b.task, lent)]
    merge_in = b.merge.inputs[0]
    merge_in.publishers = [p for p in merge_in.publishers if p is not receiver]
    receiver.outputs[0] = [b.consumer_buf]
    undelivered = _hand_consumer_to(sched, b, receiver)
    end_handled = getattr(b.replica.op, "end_handled", None)
    if end_handled is not None:
        end_handled()  # replica 0's operator ran the unit until now: the moved replica gives the end outputs
    _complete(sched, b)
    sched.publisher_ended_locked(merge_in)  # the receiver's share of the merge's input
    # The split's coroutine has not run: it reads its own waiting input, which ends now, so the split ends
    # with nothing, then replica 0 and the merge.
    b.split_context.inputs[0] = InputPort(b.split.inputs[0], b.split, 0)
    sched.publisher_ended_locked(b.split.inputs[0])
    sched.make_ready_locked(sender)
    _wake_consumer(sched, b, undelivered)


def _why_not(b: _Bypass, sched: Scheduler) -> str:
    if sched.shutdown_requested:
        return "the flow is shutting down"
    if b.task.state is OperatorState.COMPLETED:
        return f"{b.spec.unit!r} has reached the end of its input"
    return f"{b.spec.unit!r} did not reach a safe point in time"
