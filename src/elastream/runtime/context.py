"""The operator's view of the runtime: :class:`Context` and its ports.

A context is created per operator when a flow is compiled and is used only by
that operator's code, which runs in one worker thread at a time. Every blocking
call suspends the operator coroutine through :func:`~elastream.runtime.traps.suspend`
(never the thread).

Example (C-Stream Listing 2)::

    async def process(self, ctx):
        spec = {port: 1 for port in ctx.inputs}
        while not ctx.shutdown_requested:
            if await ctx.wait_for_all(spec) is es.Status.OVER:
                break
            await ctx.outputs[0].push(tuple(p.pop() for p in ctx.inputs))
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from elastream.operators.base import Status
from elastream.operators.user_code import push_not_awaited
from elastream.runtime.clock import Clock, resolve
from elastream.runtime.traps import PREEMPT, ExternalWait, ReadWait, Sleep, WaitMode, WriteWait, suspend

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.buffer import PortBuffer
    from elastream.runtime.task import Task


class InputPort:
    """An operator's input port: ``pop()``, ``peek()``, ``len()``, ``closed``, ``pop_many(n)``."""

    __slots__ = ("_buf", "_task", "index")

    def __init__(self, buf: PortBuffer, task: Task, index: int):
        self._buf = buf
        self._task = task
        self.index = index

    def read_from(self, buf: PortBuffer) -> None:
        """Read ``buf`` from now on (a reconfiguration, the scheduler's lock held: runtime.bypass). A wait in
        progress still watches the buffer it started on: the caller ends that one."""
        self._buf = buf

    def pop(self) -> Any:
        """Remove and return the front tuple (IndexError when empty)."""
        buf = self._buf
        item = buf.take_one()
        task = self._task
        task.tuples_in += 1
        task.origin = buf.last_origin
        if buf.write_waiters:
            task.sched.port_read(buf)
        return item

    def pop_many(self, n: int | None = None) -> list:
        """Remove and return up to ``n`` tuples (all available when None)."""
        buf = self._buf
        items, origin = buf.take(buf.count if n is None else n)
        if items:
            task = self._task
            task.tuples_in += len(items)
            task.origin = origin
            if buf.write_waiters:
                task.sched.port_read(buf)
        return items

    def peek(self) -> Any:
        """The front tuple, left in place (IndexError when empty)."""
        return self._buf.peek()

    def rewrite(self, fn: Callable[[list], list | None]) -> int:
        """Replace the queued tuples by ``fn(queued)`` unless it returns None (it may only take tuples out);
        returns how many it took out. For the engine's own operators (an ordered replica answering
        a key group's export early); producers wait while ``fn`` runs."""
        buf = self._buf
        removed = buf.rewrite(fn)
        if removed and buf.write_waiters:
            self._task.sched.port_read(buf)
        return removed

    def __len__(self) -> int:
        return self._buf.count

    @property
    def received(self) -> int:
        """Tuples that have arrived at this port so far (a counter: what came in since a look)."""
        return self._buf.writes

    @property
    def closed(self) -> bool:
        """True once every upstream operator has completed (C-Stream §3.2.3)."""
        return self._buf.closed

    @property
    def exhausted(self) -> bool:
        """Closed and empty: no tuple will ever be popped again."""
        return self._buf.closed and self._buf.count == 0

    def __repr__(self) -> str:
        return f"<InputPort {self._buf.name} len={self._buf.count}{' closed' if self.closed else ''}>"


class OutputPort:
    """An operator's output port: ``await push(t)`` / ``await push_many(ts)`` with back-pressure.

    A push offers its tuples at once and returns an awaitable: awaiting it waits
    for room downstream and ends the quantum when it is over. A push that is not
    awaited is an error, raised (naming the operator) at the operator's next push
    or suspension — cheaper and surer than noticing a never-awaited coroutine.
    """

    __slots__ = ("_task", "index", "_now", "_pushed")

    def __init__(self, task: Task, index: int, clock: Clock | None = None):
        self._task = task
        self.index = index
        self._now = resolve(clock).now  # bound once: one plain call per push, as perf_counter was
        self._pushed = _Pushed(task)  # one per port: the common push allocates no awaitable

    def push(self, item: Any, clock_time: float | None = None) -> Awaitable[None]:
        """Push one tuple to every subscriber; ``await`` it: it suspends while a buffer is full (Algorithm 3).

        ``clock_time`` (a source's only): the tuple's clock time (Haren §2), e.g. the time a rate-driven
        source was due to emit it, so that time spent behind an overloaded flow counts; default: now.
        """
        task = self._task
        if task.unawaited_push is not None:
            raise push_not_awaited(task.name, task.unawaited_push.index)
        now = self._now
        origin = task.origin if task.inputs else now() if clock_time is None else clock_time
        task.unawaited_push = self
        if not task.emit(self.index, [item], origin):
            return self._wait_room()
        if now() >= task.deadline:
            return self._end_quantum()
        return self._pushed

    def push_many(self, items: Iterable[Any], clock_time: float | None = None) -> Awaitable[None]:
        """Push many tuples in order; ``await`` it: it suspends while a buffer is full (``clock_time``: see push)."""
        task = self._task
        if task.unawaited_push is not None:
            raise push_not_awaited(task.name, task.unawaited_push.index)
        task.unawaited_push = self
        batch = items if type(items) is list else list(items)
        if not batch:
            return self._pushed
        now = self._now
        origin = task.origin if task.inputs else now() if clock_time is None else clock_time
        if not task.emit(self.index, batch, origin):
            return self._wait_room()
        if now() >= task.deadline:
            return self._end_quantum()
        return self._pushed

    async def _wait_room(self) -> None:
        task = self._task
        task.unawaited_push = None
        await _wait_pending(task)
        if self._now() >= task.deadline:
            await suspend(PREEMPT)

    async def _end_quantum(self) -> None:
        self._task.unawaited_push = None
        await suspend(PREEMPT)

    def __repr__(self) -> str:
        return f"<OutputPort {self._task.name}.out({self.index})>"


class _Pushed:
    """What a push returns when its tuples were all accepted within the quantum: awaiting it only marks
    the push awaited."""

    __slots__ = ("_task",)

    def __init__(self, task: Task):
        self._task = task

    def __await__(self) -> Generator[Any, None, None]:
        self._task.unawaited_push = None
        return _NOTHING  # type: ignore[return-value]  # an exhausted iterator: the await ends at once


_NOTHING = iter(())


async def _wait_pending(task: Task) -> None:
    while True:
        await suspend(WriteWait(task.pending_buffers()))
        if task.flush_pending():
            return


class Context:
    """What an operator's ``process`` coroutine sees of the runtime.

    ``clock`` (default: the real clock) is what :attr:`now`, :meth:`sleep` and the
    preemption checks read; it must be the scheduler's, which sets dispatch
    deadlines and fires the sleep timers (the worker rebinds it with
    :meth:`use_clock` before opening the operator).
    """

    def __init__(self, task: Task, inputs: list[InputPort], outputs: list[OutputPort], clock: Clock | None = None):
        self._task = task
        self.inputs = inputs
        self.outputs = outputs
        self.name = task.name
        self.logger = logging.getLogger(f"elastream.op.{task.name}")
        self.clock: Clock = resolve(clock)
        self.use_clock(self.clock)

    def use_clock(self, clock: Clock) -> None:
        """Read time from ``clock`` (here and in the output ports); called before the operator opens."""
        self.clock = clock
        self._now = clock.now
        for port in self.outputs:
            port._now = clock.now

    @property
    def shutdown_requested(self) -> bool:
        """True once an explicit shutdown (or a failure elsewhere) was requested."""
        return self._task.sched.shutdown_requested

    @property
    def others_ready(self) -> bool:
        """True while other operators of this process wait for a worker (the process is busy):
        ready ones, and sleeping ones whose timer is due.

        A hint, read without the scheduler's lock: an operator that would wait for something
        outside the process can then nap on a timer, served between two activations, instead
        of having a thread woken for it.
        """
        return self._task.sched.work_waiting()

    def _resolve(self, spec: Mapping[Any, int]) -> tuple[tuple[PortBuffer, int], ...]:
        out = []
        for port, count in spec.items():
            if isinstance(port, int):
                port = self.inputs[port]
            elif not isinstance(port, InputPort) or port._task is not self._task:
                raise ValueError(f"operator {self.name!r}: wait spec keys must be this operator's "
                                 f"input ports or their indexes, got {port!r}")
            out.append((port._buf, int(count)))
        return tuple(out)

    async def wait_for_all(self, spec: Mapping[Any, int]) -> Status:
        """Wait until every port in ``spec`` holds its count (Algorithm 1).

        Returns ``Status.OVER`` as soon as one port is closed without enough
        tuples, or on shutdown.
        """
        resolved = self._resolve(spec)
        task = self._task
        task.conj_waits += 1
        while True:
            if all(b.count >= c for b, c in resolved):
                if self._now() >= task.deadline:
                    await suspend(PREEMPT)
                return Status.DONE
            # Closed flags before counts: a producer pushes before it completes.
            if any(b.closed and b.count < c for b, c in resolved) or self._task.sched.shutdown_requested:
                if all(b.count >= c for b, c in resolved):
                    return Status.DONE
                return Status.OVER
            await suspend(ReadWait(resolved, WaitMode.CONJ))

    async def wait_for_any(self, spec: Mapping[Any, int]) -> Status:
        """Wait until some port in ``spec`` holds its count (Algorithm 2).

        Returns ``Status.OVER`` only when no port can ever satisfy it, or on shutdown.
        """
        resolved = self._resolve(spec)
        task = self._task
        task.disj_waits += 1
        while True:
            if any(b.count >= c for b, c in resolved):
                if self._now() >= task.deadline:
                    await suspend(PREEMPT)
                return Status.DONE
            if all(b.closed for b, _ in resolved) or self._task.sched.shutdown_requested:
                if any(b.count >= c for b, c in resolved):
                    return Status.DONE
                return Status.OVER
            await suspend(ReadWait(resolved, WaitMode.DISJ))

    async def sleep(self, seconds: float) -> None:
        """Suspend this operator for ``seconds`` without holding a worker thread."""
        await self.sleep_until(self._now() + seconds)

    async def sleep_until(self, when: float) -> None:
        """Suspend until the instant ``when`` of the runtime clock (:attr:`now`)."""
        if when > self._now() and not self._task.sched.shutdown_requested:
            await suspend(Sleep(when))

    async def wait_external(self, probe: Callable[[], bool], *, write: bool = False, waiter: Any = None) -> None:
        """Suspend until ``probe()`` is true, where only another process can make it so.

        The operator counts as WRITE_BLOCKED (``write=True``, e.g. a full
        shared-memory ring) or READ_BLOCKED; a poller thread re-checks the probe
        with capped exponential back-off, so no worker thread spins — or, given
        a ``waiter`` (:class:`~elastream.runtime.poller.Waiter`), sleeps on its
        file descriptor until the other process writes to it. Returns at once
        on shutdown. ``probe`` and the waiter run in the poller thread while
        this operator is suspended.
        """
        if not probe() and not self._task.sched.shutdown_requested:
            await suspend(ExternalWait(probe, write, waiter))

    def request_shutdown(self) -> None:
        """Stop the whole flow of this process, as an explicit shutdown does (operators see
        :attr:`shutdown_requested`, waits return OVER, no end-of-input hooks run)."""
        self._task.sched.request_shutdown()

    async def yield_now(self) -> None:
        """Give other operators a turn if this one's quantum is used up."""
        if self._now() >= self._task.deadline:
            await suspend(PREEMPT)

    async def give_way(self) -> None:
        """Let the operators of this process that wait for a worker run first; this one is ready again at once.

        For an operator whose units of work are long (milliseconds each): between two of
        them, so that it does not keep the worker for its whole quantum while others — the
        ones that feed it, or carry its results away — wait. Free when nothing waits.
        """
        if self._task.sched.work_waiting():
            await suspend(PREEMPT)

    def count_malformed(self, n: int = 1) -> None:
        """Count records skipped under the ``skip`` error policy."""
        self._task.malformed += n

    @property
    def now(self) -> float:
        """The runtime clock's time in seconds (``time.perf_counter()`` unless the run has another clock)."""
        return self._now()

    def __repr__(self) -> str:
        return f"<Context {self.name}>"
