"""Runtime records of operators: the unit a worker runs for a bounded budget.

A :class:`Task` wraps one operator of a compiled flow. ``run(deadline)`` is
called by exactly one worker at a time (the scheduler guarantees it: the task is
RUNNING and owned by that worker) and returns an outcome message from
:mod:`elastream.runtime.traps`. Counters on a task are written only by the
worker that runs it; other threads read them for statistics.

* :class:`CoroutineTask` resumes the operator's ``process`` coroutine with
  ``send`` until it suspends (any worker thread may resume it next time).
* :class:`FunctionTask` takes batches from its input buffers and calls
  ``on_batch`` until its quantum ends or it blocks (Haren ``run(b)``).
* :class:`SourceTask` pulls batches from a source operator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elastream.operators.user_code import explain_asyncio, foreign_await, push_not_awaited
from elastream.runtime.clock import REAL_CLOCK
from elastream.runtime.states import OperatorState
from elastream.runtime.traps import COMPLETED, PREEMPT, ExternalWait, Outcome, ReadWait, Sleep, WaitMode, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    import threading

    from elastream.operators.base import Operator
    from elastream.operators.spec import OperatorSpec
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.context import Context
    from elastream.runtime.scheduler import Scheduler

_READ_BLOCKED = OperatorState.READ_BLOCKED
#: What a coroutine operator may suspend with: the messages of runtime.traps (anything else is a foreign await).
_MESSAGE_TYPES = frozenset({ReadWait, WriteWait, Sleep, ExternalWait, type(PREEMPT)})


class Task:
    """Scheduling record and driver of one operator."""

    #: True when the runtime (not operator code) issues this task's read waits.
    implicit_waits = True
    #: True when several workers may run this task at once (dynamic allotment, see runtime.allotment).
    shared = False
    #: The condition its dedicated worker waits on (the dedicated model, runtime.dedicated); None: any worker.
    waker: threading.Condition | None = None
    #: The run's clock (seconds); the scheduler sets each task's to its own (an injectable clock, see
    #: runtime.clock), bound once so a batch pays one plain call as with perf_counter.
    now = staticmethod(REAL_CLOCK.now)

    def __init__(self, name: str, op: Operator, index: int, batch_size: int, spec: OperatorSpec | None = None):
        self.name = name
        self.op = op
        self.index = index
        self.batch_size = batch_size
        #: What the operator is, frozen (read once here: the runtime matches on it, never on classes).
        self.spec = op.spec() if spec is None else spec
        self.kind = self.spec.kind
        self.state = OperatorState.READY
        self.inputs: list[PortBuffer] = []
        self.outputs: list[list[PortBuffer]] = [[] for _ in range(op.n_outputs)]
        self.sched: Scheduler = None  # type: ignore[assignment]  # set by the runner
        self.context: Context | None = None
        self.opened = False
        self.is_source = op.n_inputs == 0
        # Graph position, set by the compiler: publishers, subscribers and the
        # longest path from a source (the "pipeline order" of ordered-multicore §6).
        self.upstream: list[Task] = []
        self.downstream: list[Task] = []
        self.position = 0
        self.max_workers = self.spec.max_workers
        self.workers = 0
        self.peak_workers = 0
        # Wait conditions, owned by the scheduler (changed under its lock).
        self.read_wait: dict[PortBuffer, int] = {}
        self.read_mode = WaitMode.CONJ
        self.write_wait: tuple[PortBuffer, ...] = ()
        self.external_wait = False
        # Tuples accepted by the operator but not yet by a downstream buffer:
        # [buffer, items, origin] in push order.
        self.pending: list[list[Any]] = []
        #: The output port whose last push was not awaited yet (a coroutine operator's; see OutputPort.push).
        self.unawaited_push: Any = None
        self.origin = 0.0
        self.deadline = 0.0
        self.sleep_seq = 0
        # Counters (C-Stream §3.2.6).
        self.activations = 0
        self.busy_s = 0.0
        self.cpu_s = 0.0
        # Tuples emitted per downstream buffer (TurboStream §V.D traffic monitor).
        self.sent: dict[PortBuffer, int] = {}
        self.tuples_in = 0
        self.tuples_out = 0
        self.last_scheduled = 0.0
        self.conj_waits = 0
        self.disj_waits = 0
        self.read_blocked_s = 0.0
        self.write_blocked_s = 0.0
        self.blocked_since = 0.0
        self.malformed = 0
        self.read_rate = 0.0
        self.write_rate = 0.0

    # -- life cycle ---------------------------------------------------------
    def open(self, context: Context) -> None:
        """Bind the context and call the operator's ``open`` hook."""
        self.context = context
        # Set first: close() must run even when open() raises half-way.
        self.opened = True
        self.op.open(context)

    def close(self) -> None:
        """Call the operator's ``close`` hook (sinks flush here)."""
        if self.opened:
            self.opened = False
            self.op.close()

    def run(self, deadline: float) -> Outcome:
        """Run until the deadline or until blocked; return the outcome message."""
        raise NotImplementedError

    def shareable(self) -> bool:
        """Could one more worker join this RUNNING task now? Only shared tasks say yes."""
        return False

    def abandon(self) -> None:
        """Drop what the operator holds after a shutdown or failure."""
        self.pending.clear()

    # -- features read by policies ----------------------------------------------
    @property
    def queued(self) -> int:
        """Tuples waiting in this operator's input buffers."""
        return sum(b.count for b in self.inputs)

    def front_times(self) -> tuple[float, float] | None:
        """(enqueue, origin) times of the oldest front tuple over the inputs."""
        best = None
        for b in self.inputs:
            t = b.front_times()
            if t is not None and (best is None or t[0] < best[0]):
                best = t
        return best

    @property
    def cost_per_tuple(self) -> float:
        """Measured worker seconds per input tuple (per output tuple for a source); 0 before any."""
        n = self.tuples_out if self.is_source else self.tuples_in
        return self.busy_s / n if n else 0.0

    @property
    def selectivity(self) -> float:
        """Measured outputs per input tuple (1 for sources and before any input)."""
        if self.is_source or not self.tuples_in:
            return 1.0
        return self.tuples_out / self.tuples_in

    def output_queued(self) -> int:
        """Tuples waiting in the buffers this operator feeds (its "output queue")."""
        return sum(b.count for subs in self.outputs for b in subs)

    def free_downstream(self) -> int:
        """Smallest free space over the subscribing downstream buffers (-1: no outputs)."""
        free = -1
        for subs in self.outputs:
            for b in subs:
                f = b.capacity - b.count
                if free < 0 or f < free:
                    free = f
        return free

    # -- emission (Algorithm 3) --------------------------------------------------
    def emit(self, port: int, items: list, origin: float) -> bool:
        """Offer ``items`` to every subscriber of output ``port``.

        What does not fit is kept in ``pending`` per buffer, so each stream
        stays FIFO. Returns True when everything was accepted.
        """
        self.tuples_out += len(items)
        subs = self.outputs[port]
        if not subs:
            return True
        sched = self.sched
        if sched.shutdown_requested:
            self._force(subs, items, origin)
            return True
        now = self.now()
        last = len(subs) - 1
        size = len(items)
        sent = self.sent
        for i, buf in enumerate(subs):
            sent[buf] = sent.get(buf, 0) + size
            chunk = items if i == last else list(items)
            n = buf.offer(chunk, origin, now)
            # From here the buffer owns ``chunk`` (a consumer may extend it in
            # place), so only ``size``, read before the offer, is trusted.
            if n < size:
                self.pending.append([buf, chunk[n:size], origin])
            if n and buf.owner.state is _READ_BLOCKED:
                sched.port_written(buf)
        return not self.pending

    def flush_pending(self) -> bool:
        """Retry pending emissions; True when nothing is left pending."""
        sched = self.sched
        if sched.shutdown_requested:
            for buf, items, origin in self.pending:
                self._force((buf,), items, origin)
            self.pending.clear()
            return True
        now = self.now()
        still = []
        for entry in self.pending:
            buf, items, origin = entry
            size = len(items)  # read before the buffer may own (and extend) ``items``
            n = buf.offer(items, origin, now)
            if n < size:
                if n:
                    entry[1] = items[n:size]
                still.append(entry)
            if n and buf.owner.state is _READ_BLOCKED:
                sched.port_written(buf)
        self.pending = still
        return not still

    def pending_buffers(self) -> tuple[PortBuffer, ...]:
        """The full buffers this task waits on."""
        return tuple(e[0] for e in self.pending)

    def _force(self, subs: Any, items: list, origin: float) -> None:
        now = self.now()
        for i, buf in enumerate(subs):
            self.sent[buf] = self.sent.get(buf, 0) + len(items)
            buf.force(items if i == 0 else list(items), origin, now)
            if buf.owner.state is _READ_BLOCKED:
                self.sched.port_written(buf)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.state.name}>"


class CoroutineTask(Task):
    """Drives an ``async def process(ctx)`` operator as a co-routine (C-Stream §3.1)."""

    implicit_waits = False

    def __init__(self, name: str, op: Operator, index: int, batch_size: int, spec: OperatorSpec | None = None):
        super().__init__(name, op, index, batch_size, spec)
        self.coro: Any = None

    def open(self, context: Context) -> None:
        super().open(context)
        self.coro = self.op.process(context)
        if not hasattr(self.coro, "send"):
            raise TypeError(f"operator {self.name!r} ({type(self.op).__name__}): process returned "
                            f"{type(self.coro).__name__}, not a coroutine; write async def process(self, ctx)")

    def run(self, deadline: float) -> Outcome:
        self.deadline = deadline
        try:
            msg = self.coro.send(None)
        except StopIteration:
            if self.unawaited_push is not None:
                raise push_not_awaited(self.name, self.unawaited_push.index) from None
            return COMPLETED
        except RuntimeError as exc:
            error = explain_asyncio(self.name, exc)
            if error is None:
                raise
            raise error from exc
        if self.unawaited_push is not None or msg.__class__ not in _MESSAGE_TYPES:
            self._refuse_suspension(msg)
        if self.sched.shutdown_requested and (msg is not PREEMPT or self.sched.past_shutdown_grace()):
            # The operator keeps running after shutdown: end it (finally blocks run).
            self.coro.close()
            return COMPLETED
        return msg

    def abandon(self) -> None:
        super().abandon()
        if self.coro is not None:
            self.coro.close()

    def _refuse_suspension(self, msg: Any) -> None:
        """The operator suspended after a push it did not await, or on something not elastream's: raise."""
        if self.unawaited_push is not None:
            raise push_not_awaited(self.name, self.unawaited_push.index)
        raise foreign_await(self.name, msg)


class FunctionTask(Task):
    """Drives a :class:`FunctionOperator` batch by batch."""

    def __init__(self, name: str, op: Operator, index: int, batch_size: int, spec: OperatorSpec | None = None):
        super().__init__(name, op, index, batch_size, spec)
        self._rr = 0
        self._inputs_done = False
        self._read_wait: ReadWait | None = None

    def run(self, deadline: float) -> Outcome:
        if self.pending and not self.flush_pending():
            return WriteWait(self.pending_buffers())
        if self._inputs_done:
            return COMPLETED
        sched = self.sched
        on_batch = self.op.on_batch  # type: ignore[attr-defined]
        batch = self.batch_size
        while not sched.shutdown_requested:
            buf = self._next_nonempty()
            if buf is None:
                return self._on_no_input()
            items, origin = buf.take(batch)
            if buf.write_waiters:
                sched.port_read(buf)
            self.tuples_in += len(items)
            self.origin = origin
            out = on_batch(items, buf.port)
            if out and not self.emit(0, out, origin):
                return WriteWait(self.pending_buffers())
            if self.now() >= deadline:
                return PREEMPT
        return COMPLETED

    def _next_nonempty(self) -> PortBuffer | None:
        inputs = self.inputs
        n = len(inputs)
        if n == 1:
            b = inputs[0]
            return b if b.count else None
        for k in range(n):
            b = inputs[(self._rr + k) % n]
            if b.count:
                self._rr = (self._rr + k + 1) % n
                return b
        return None

    def _on_no_input(self) -> Outcome:
        # Read closed flags before counts: a producer pushes before it completes.
        if all(b.closed for b in self.inputs) and not any(b.count for b in self.inputs):
            self._inputs_done = True
            if self.sched.shutdown_requested:
                return COMPLETED  # inputs closed by a shutdown are cut short, not ended: no end-of-input hook
            final = self.op.on_inputs_closed()  # type: ignore[attr-defined]
            if final and not self.emit(0, final, self.origin):
                return WriteWait(self.pending_buffers())
            return COMPLETED
        if self._read_wait is None:
            self._read_wait = ReadWait(tuple((b, 1) for b in self.inputs), WaitMode.DISJ)
        return self._read_wait


class SourceTask(Task):
    """Drives a :class:`SourceOperator` by pulling batches."""

    def __init__(self, name: str, op: Operator, index: int, batch_size: int, spec: OperatorSpec | None = None):
        super().__init__(name, op, index, batch_size, spec)
        self._exhausted = False
        self._side = op.n_outputs > 1

    def run(self, deadline: float) -> Outcome:
        if self.pending and not self.flush_pending():
            return WriteWait(self.pending_buffers())
        if self._exhausted:
            return COMPLETED
        sched = self.sched
        op = self.op
        next_batch = op.next_batch  # type: ignore[attr-defined]
        batch = self.batch_size
        while not sched.shutdown_requested:
            items = next_batch(batch)
            now = self.now()
            if items:
                self.emit(0, items, now)
            if self._side:
                for port, side in op.take_side_outputs():  # type: ignore[attr-defined]
                    self.emit(port, side, now)
            if items is None:
                self._exhausted = True
            if self.pending:
                return WriteWait(self.pending_buffers())
            if items is None:
                return COMPLETED
            if not items or self.now() >= deadline:
                return PREEMPT
        return COMPLETED
