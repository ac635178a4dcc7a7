"""Dynamic allotment: several workers on one function operator at once (ordered-multicore §2.2, §3–§5).

Role: the task driver of stateless operators (most workers: unbounded) and
partitioned stateful ones (most workers: their partition count) when the
runner has more than one worker thread. The scheduler may hand such a task to
a new worker while others still run it (``Task.workers`` counts them, under
the scheduler lock); the outputs still leave in the order of a sequential
one-tuple-at-a-time run (Definition 5.1):

* **Stateless.** Under the intake lock a worker takes a batch from the input
  and gives it the next serial number. Numbering at an atomic dequeue names
  the same order as numbering at enqueue (§3): the input is FIFO. The batch
  is processed outside any lock, and its outputs (possibly none, which still
  advances the window) are offered under that serial to the reorder buffer.
* **Partitioned.** Under the intake lock a worker takes a batch, numbers it
  and splits it by partition into groups that go to a partitioned input (the
  hybrid queue of Fig. 7, or the partitioned queues of §4.2). Workers claim
  one partition at a time, so one key's tuples run one at a time and in
  order; each tuple's outputs are kept at its place in its batch, and the
  worker that completes a batch's last group offers the batch's outputs, in
  input order, under the batch's serial. (Serials per batch rather than per
  tuple: in Python every reorder step costs microseconds.)
* **Release.** The reorder buffer (non-blocking Fig. 4, or the lock-based
  Fig. 2 baseline) releases outputs in serial order into an outbox; one
  worker at a time (a test-and-set flag, re-checked after clearing as in
  Fig. 4) moves the outbox into the downstream buffers.

No thread ever waits for another: a reorder add refused because its serial
is beyond the window is kept and retried by whichever worker runs the task
next (every worker retries after its own add, and the serial everybody
waits for is always inside the window); a full downstream buffer keeps
outputs pending and the task stops taking input (WriteBlocked when its last
worker leaves). A worker that stops without knowing it is alone returns
``LEAVE``; the last worker out decides the task's state, and end of stream
(``on_inputs_closed``) runs on one worker alone once everything taken has
been released and delivered.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from elastream.operators.spec import Driver, Kind, OperatorSpec
from elastream.ordered.partitioning import make_partitioned_input, make_partitioner
from elastream.ordered.reorder import make_reorder_buffer
from elastream.runtime.task import FunctionTask
from elastream.runtime.traps import COMPLETED, LEAVE, PREEMPT, Outcome, ReadWait, WaitMode, WriteWait

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.base import Operator

#: Reorder window of a task, in batches (serials).
STATELESS_WINDOW = 64
#: Batches a partitioned task may hold in its partitioned input.
PARTITIONED_BACKLOG = 4
#: Groups (one batch's tuples of one partition) a worker claims at once.
CLAIM_GROUPS = 8


class _Outputs(list):
    """One serial's outputs, with the origin time of the input that produced them."""

    __slots__ = ("origin",)


class _Batch:
    """A partitioned task's input batch in flight: its serial, per-tuple outputs, groups left to run."""

    __slots__ = ("serial", "origin", "outputs", "groups_left")

    def __init__(self, serial: int, origin: float, size: int, groups: int):
        self.serial = serial
        self.origin = origin
        self.outputs: list[Any] = [()] * size
        # One token per group; list.pop() is atomic, and whoever pops token 0 ran the batch's last group.
        self.groups_left = list(range(groups))


class ParallelFunctionTask(FunctionTask):
    """Drives a stateless or partitioned :class:`FunctionOperator` on up to ``max_workers`` workers at once."""

    shared = True

    def __init__(self, name: str, op: Operator, index: int, batch_size: int, *, reorder: str = "nonblocking",
                 partitioning: str = "hybrid", spec: OperatorSpec | None = None):
        super().__init__(name, op, index, batch_size, spec)
        spec = self.spec
        self.partitioned = spec.kind is Kind.PARTITIONED
        self._intake = threading.Lock()           # take from the input + number: one atomic step
        self._serial = 0                          # serials handed out so far (guarded by _intake)
        self._outbox: deque[list] = deque()       # released outputs, in serial order, not yet downstream
        self._drain_flag = threading.Lock()       # test-and-set: one worker moves the outbox at a time
        self._refused: deque[tuple[int, list]] = deque()
        self._sharing = False                     # set once open() has completed
        self._outbox_limit = 4
        if self.partitioned:
            partitions = spec.partitions
            # Entries are groups already routed to their partition (the key is the partition index);
            # claim_ahead: claims of several groups even when partitions interleave (Python pays per claim).
            self._claims = make_partitioned_input(partitioning, partitions, partitioner=_Routed(partitions),
                                                  workers=partitions, claim_ahead=True)
            self._key = spec.key
            self._partition_of = _partitioner_of(spec)
            # Keys in input order, for operators whose end-of-stream output follows key order (on_end).
            self._first_seen: dict[Any, None] | None = {} if spec.on_end is not None else None
            self._free_slots = list(range(partitions))   # §4.2 worker slots of the workers on the task
            self._backlog_limit = PARTITIONED_BACKLOG * partitions
        else:
            self._claims = None
        self._reorder = make_reorder_buffer(reorder, STATELESS_WINDOW, self._outbox.append)

    # -- scheduler side (lock held) -----------------------------------------------------------
    def shareable(self) -> bool:
        """Could one more worker do useful work on this task now? (Read under the scheduler lock.)"""
        if (self.workers >= self.max_workers or not self._sharing or self._refused or self.pending
                or len(self._outbox) > self._outbox_limit or self.sched.shutdown_requested):
            return False
        if self.partitioned:
            # Only work a newcomer could take: delegated tuples or partitions in held slots are not its.
            if self._claims.claimable(self._free_slots):
                return True
            if len(self._claims) >= self._backlog_limit:
                return False
        return any(b.count for b in self.inputs)

    # -- one worker's turn ------------------------------------------------------------------------
    def run(self, deadline: float) -> Outcome:
        self._sharing = True
        if self.sched.shutdown_requested:
            return COMPLETED if self.workers == 1 else LEAVE
        if not self.partitioned:
            return self._run_stateless(deadline)
        slot = self._free_slots.pop()             # never empty: at most `partitions` workers at once
        try:
            return self._run_partitioned(deadline, slot)
        finally:
            self._free_slots.append(slot)

    def _run_stateless(self, deadline: float) -> Outcome:
        while True:
            blocked = self._settle()
            if blocked is not None:
                return blocked
            if self._refused or len(self._outbox) > self._outbox_limit:
                # The lowest unreleased serial is being processed by a running worker (serials are
                # numbered when taken), which retries the refused outputs after its own add.
                return LEAVE
            if not self._step_stateless():
                return self._no_work()
            if self.sched.shutdown_requested:
                return COMPLETED if self.workers == 1 else LEAVE
            if self.now() >= deadline:
                return PREEMPT

    def _run_partitioned(self, deadline: float, slot: int) -> Outcome:
        while True:
            blocked = self._settle()
            if blocked is not None:
                return blocked
            # With refused outputs, keep claiming queued tuples (the next serial may be among them) but
            # take no new input: the partitioned input then drains and the window catches up.
            admit = not self._refused and len(self._outbox) <= self._outbox_limit
            if not self._step_partitioned(slot, admit):
                return self._no_work()
            if self.sched.shutdown_requested:
                return COMPLETED if self.workers == 1 else LEAVE
            if self.now() >= deadline:
                return PREEMPT

    def _settle(self) -> Outcome | None:
        """Retry refused outputs and move released ones downstream; WriteWait when downstream is full."""
        if self._refused:
            self._retry_refused()
        if self._outbox or self.pending:
            self._drain()
        if self.pending:
            return WriteWait(self.pending_buffers())
        return None

    def _step_stateless(self) -> bool:
        with self._intake:
            taken = self._take_input()
            if taken is None:
                return False
            buf, items, origin = taken
            serial = self._serial
            self._serial = serial + 1
        if buf.write_waiters:
            self.sched.port_read(buf)
        outputs = _Outputs(self.op.on_batch(items, buf.port) or ())  # type: ignore[attr-defined]
        outputs.origin = origin
        self._add(serial, outputs)
        return True

    def _step_partitioned(self, slot: int, admit: bool) -> bool:
        claim = self._take_claim(slot)
        if claim is None:
            if not admit or not self._intake_partitioned():
                return False
            claim = self._take_claim(slot)
            if claim is None:                     # what came in belongs to partitions others hold
                return True
        try:
            on_items = self.op.on_items  # type: ignore[attr-defined]
            for _serial, _partition, (batch, places, items) in claim.items:
                outputs = batch.outputs
                for i, emitted in zip(places, on_items(items, 0)):
                    outputs[i] = emitted
                if batch.groups_left.pop() == 0:
                    self._release_batch(batch)
        finally:
            self._claims.done(claim.partition)
        return True

    def _release_batch(self, batch: _Batch) -> None:
        """The last group of ``batch`` has run: offer its outputs, in input order, under its serial."""
        outputs = _Outputs(out for per_tuple in batch.outputs if per_tuple for out in per_tuple)
        outputs.origin = batch.origin
        self._add(batch.serial, outputs)

    def _take_claim(self, slot: int) -> Any:
        """A claim for this worker: its own slot first, then slots no running worker serves (§4.2 baseline).

        The hybrid queue ignores slots. The partitioned baseline maps
        partitions statically to slots; each worker on the task holds one
        slot, and the slots nobody holds are served by whoever finds its own
        empty, so a lone worker still reaches every partition.
        """
        claims, budget = self._claims, CLAIM_GROUPS
        claim = claims.take(budget, worker=slot)
        if claim is not None or claims.scheme == "hybrid":
            return claim
        for other in list(self._free_slots):
            claim = claims.take(budget, worker=other)
            if claim is not None:
                return claim
        return None

    def _intake_partitioned(self) -> bool:
        """Move one batch from the input into the partitioned input (numbered there, in input order)."""
        if len(self._claims) >= self._backlog_limit:
            return False
        with self._intake:
            taken = self._take_input()
            if taken is None:
                return False
            buf, items, origin = taken
            groups: dict[int, tuple[list[int], list[Any]]] = {}
            key, partition_of, first_seen = self._key, self._partition_of, self._first_seen
            for i, x in enumerate(items):
                k = key(x)
                if first_seen is not None and k not in first_seen:
                    first_seen[k] = None
                p = partition_of(k)
                group = groups.get(p)
                if group is None:
                    groups[p] = ([i], [x])
                else:
                    group[0].append(i)
                    group[1].append(x)
            batch = _Batch(self._serial, origin, len(items), len(groups))
            self._serial += 1
            self._claims.put_many([(p, (batch, places, group)) for p, (places, group) in groups.items()])
            self.origin = origin
        if buf.write_waiters:
            self.sched.port_read(buf)
        return True

    def _take_input(self) -> tuple[Any, list, float] | None:
        """``(buffer, items, origin)`` of one batch from the next non-empty input; the intake lock is held."""
        buf = self._next_nonempty()
        if buf is None:
            return None
        items, origin = buf.take(self.batch_size)
        self.tuples_in += len(items)
        return buf, items, origin

    def _no_work(self) -> Outcome:
        """Nothing this worker may take: wait for input, leave to the others, or end the stream."""
        if self._refused or (self.partitioned and not self._claims.is_idle()):
            return LEAVE                          # work in flight, or queued in partitions others hold
        if all(b.closed for b in self.inputs) and not any(b.count for b in self.inputs):
            return self._finish()
        return self._wait_for_input()

    def _wait_for_input(self) -> Outcome:
        if self._read_wait is None:
            self._read_wait = ReadWait(tuple((b, 1) for b in self.inputs), WaitMode.DISJ)
        return self._read_wait

    def _finish(self) -> Outcome:
        """End of stream, on one worker alone: everything released and delivered, then ``on_inputs_closed``."""
        if self.workers > 1:
            return LEAVE
        if not self._inputs_done:
            if self._refused or self._reorder.next_serial != self._serial:
                raise RuntimeError(f"{self.name}: end of stream with outputs still unreleased "
                                   f"(next serial {self._reorder.next_serial} of {self._serial})")
            self._inputs_done = True
            if self.partitioned and self._first_seen is not None:
                self.op.order_keys(self._first_seen)  # type: ignore[attr-defined]
            final = self.op.on_inputs_closed()  # type: ignore[attr-defined]
            if final:
                outputs = _Outputs(final)
                outputs.origin = self.origin
                self._outbox.append(outputs)
        self._drain()
        if self.pending:
            return WriteWait(self.pending_buffers())
        return COMPLETED

    # -- ordered release --------------------------------------------------------------------------
    def _add(self, serial: int, outputs: list) -> None:
        """Offer one serial's outputs to the reorder buffer; keep them if refused (never wait)."""
        if not self._reorder.try_add(serial, outputs):
            self._refused.append((serial, outputs))
        if self._refused:                         # the window may have moved: ours, or others' (§3)
            self._retry_refused()

    def _retry_refused(self) -> None:
        refused, try_add = self._refused, self._reorder.try_add
        for _ in range(len(refused)):
            try:
                serial, outputs = refused.popleft()
            except IndexError:                    # another worker took the rest
                return
            if not try_add(serial, outputs):
                refused.append((serial, outputs))

    def _drain(self) -> None:
        """Move released outputs downstream in order; one worker at a time, re-checked after clearing."""
        outbox, flag = self._outbox, self._drain_flag
        while outbox or self.pending:
            if not flag.acquire(False):
                return                            # the holder re-checks after it clears the flag
            try:
                if self.pending and not self.flush_pending():
                    return
                while outbox and not self.pending:
                    self._emit_outbox(outbox)
            finally:
                flag.release()
            if self.pending:
                return

    def _emit_outbox(self, outbox: deque) -> None:
        first = outbox.popleft()
        origin = getattr(first, "origin", self.origin)
        items = list(first)
        limit = 4 * self.batch_size
        while outbox and len(items) < limit:
            items.extend(outbox.popleft())
        self.emit(0, items, origin)

    def statistics(self) -> dict[str, Any]:
        """Reorder (and partitioned input) counters of this task."""
        out: dict[str, Any] = {"reorder": self._reorder.statistics()}
        if self._claims is not None:
            out["partitioned_input"] = self._claims.statistics()
        return out


class _Routed:
    """The partitioner of groups that already carry their partition index."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: int):
        self.partitions = partitions

    def __call__(self, partition: int) -> int:
        return partition


def _partitioner_of(spec: OperatorSpec) -> Any:
    """The operator's partitioning (§2.1): "range" over its declared ``key_range``; without bounds any
    fixed key → partition map keeps per-key order, so "range" falls back to hash, which spreads best."""
    if spec.strategy == "range" and spec.key_range is not None:
        return make_partitioner("range", spec.partitions, key_range=spec.key_range)
    return make_partitioner("hash", spec.partitions)


def wants_allotment(spec: OperatorSpec, threads: int) -> bool:
    """Should an operator of ``spec`` run under dynamic allotment with ``threads`` workers?

    Batch function operators of a parallel kind (stateless, partitioned) with one output and a
    worker bound above one.
    """
    return threads > 1 and spec.driver is Driver.BATCH and spec.is_parallel and spec.max_workers > 1 \
        and spec.outputs == 1
