"""Ring proxy operators: the two ends of a stream that crosses processes.

A :class:`RingSender` drains its input port in batches, encodes each batch
into one ring record and, when the ring is full, parks WRITE_BLOCKED on an
external probe (back-pressure from the consuming process). A
:class:`RingReceiver` decodes records and pushes the tuples on, parking
READ_BLOCKED while the ring is empty (napping on a timer instead while its
process is busy, so no poller wake-up interrupts the computing worker); it
completes when every producer has closed the ring (end-of-stream), which
closes the downstream port as any completed upstream operator would — unless
the producer closed it *aborted* (its process was stopped before its input
ended): then the receiver stops its own process's flow, so nothing downstream
takes the cut for the end of the data. Both run in one worker at a time.

A sender that fed a held unit's replica in another process can take over the
unit's own input when the unit moves there whole (:meth:`RingSender.carry_whole`,
called by :mod:`elastream.runtime.bypass` with the part's scheduler lock held): it
first tells the replica to run as the operator itself, then sends the tuples.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from elastream.ipc.codec import PickleCodec
from elastream.ipc.ring import RingClosedError, SharedRing
from elastream.operators.base import Kind, Operator, Status
from elastream.ordered.wire import WHOLE


#: A receiver's nap on an empty ring while its process is busy (see RingReceiver._wait_for_data).
NAP_S = 0.001
#: A ring that brought nothing for this long is idle (a held replica's, a quiet stream's): its receiver
#: parks on the poller even while its process is busy, rather than taking a timer every NAP_S.
IDLE_S = 0.02


class RingSender(Operator):
    """Input port 0 → shared-memory ring ``ring_name`` (one record per batch)."""

    kind = Kind.COROUTINE  # the engine's own ends of a ring
    urgent = True  # the consuming process may be idle until this runs (runtime.scheduler: Scheduler.urgent)

    def __init__(self, ring_name: str, batch_size: int = 256, in_flight_bytes: int | None = None, peer: str = "",
                 prefault: bool = True):
        super().__init__(inputs=1, outputs=0)
        self.ring_name = ring_name
        self.prefault = prefault
        """Map the ring's pages on open (False: as the writes first touch them, for a ring that may stay unused)."""
        self.peer = peer
        """The operator its ring feeds in the other process (a replica's name: what a moved unit's ends share)."""
        self.batch_size = batch_size
        self.in_flight_bytes = in_flight_bytes
        """Most bytes the ring may hold before a write waits (None: what fits in it)."""
        self.ring: Any = None
        self.codec = PickleCodec()
        self._ended = False
        self._switching = False
        """Its input was just replaced (a unit moved whole): the old one's end is not the stream's."""
        self._ahead: list = []
        """What goes before the next batch (the replica's switch to running its unit whole)."""
        self._whole_tuples = 0
        """Tuples a unit moved whole may have in the ring (0: not moved, or its allowance is set)."""

    def open(self, ctx) -> None:
        self.ring = SharedRing.attach(self.ring_name, prefault=self.prefault)
        self.ring.register_producer()
        self._ended = False

    def carry_whole(self, in_flight: int) -> None:
        """From now on carry a unit's own tuples to its replica, which the first message turns into the
        operator; the caller has put the unit's input in place of this sender's and closed the old one.

        At most about ``in_flight`` tuples wait in the ring (what the unit's input port holds), measured
        in bytes by the first batch: a ring's default allowance is tens of thousands of small tuples, and
        a unit running in another process behind that much would lag the others by seconds.
        """
        self._switching = True
        self._ahead = [WHOLE]
        self._whole_tuples = max(1, in_flight)

    def peer_started(self) -> bool:
        """True once the process reading this ring has started its part (its receiver claimed the ring): what
        is sent is then taken up at once (runtime.bypass moves a unit there only then). Any thread."""
        ring = self.ring
        try:
            return ring is not None and ring.has_consumer
        except RingClosedError:
            return False  # closed by a shutdown meanwhile: the move gives up on the shutdown

    async def process(self, ctx) -> None:
        port = ctx.inputs[0]
        ring = self.ring
        encode = self.codec.encode_batch
        limit = ring.capacity if self.in_flight_bytes is None else self.in_flight_bytes
        pending = ring.pending_bytes
        while not ctx.shutdown_requested:
            over = await ctx.wait_for_any({port: 1}) is Status.OVER
            if over and self._switching and not ctx.shutdown_requested:
                self._switching = False  # the old input ended: wait on the new one
                continue
            batch = [] if over else port.pop_many(self.batch_size)
            if self._ahead and not ctx.shutdown_requested:
                batch, self._ahead = self._ahead + batch, []
            if over and not batch:
                self._ended = not ctx.shutdown_requested
                break
            payloads = _fitting_payloads(encode, batch, ring.max_record_bytes)
            if self._whole_tuples and len(batch) > 1:
                limit = min(limit, _bytes_for(self._whole_tuples, len(batch), payloads))
                self._whole_tuples = 0
            for payload in payloads:
                if pending() >= limit or not ring.try_write_batch([payload]):
                    # Back-pressure from the consuming process: park WRITE_BLOCKED; the
                    # poller retries the write itself, so when we resume it is done.
                    await ctx.wait_external(lambda p=payload: pending() < limit and ring.try_write_batch([p]),
                                            write=True)
                    if ctx.shutdown_requested:
                        return

    def close(self) -> None:
        if self.ring is not None:
            # Stopped before its input ended (a shutdown, a failure in this process): the consumer must
            # not take the ring's end for the stream's, or its downstream would finish on partial data.
            self.ring.close_producer(aborted=not self._ended)
            self.ring.close()
            self.ring = None


def _bytes_for(tuples: int, batch: int, payloads: list) -> int:
    """Bytes ``tuples`` take in a ring record, by what ``batch`` tuples encoded to in ``payloads``."""
    size = sum(len(memoryview(part).cast("B")) for payload in payloads for part in payload)
    return max(1, int(size * tuples / batch))


def _fitting_payloads(encode: Any, batch: list, limit: int) -> list:
    """Encode ``batch`` as one payload, or split it until every part fits in a record."""
    payload = encode(batch)
    size = sum(len(memoryview(part).cast("B")) for part in payload) + 64
    if size <= limit or len(batch) == 1:
        if size > limit:
            raise ValueError(f"one tuple encodes to {size} bytes, more than a ring record holds ({limit}); "
                             "raise Runner(ring_bytes=...)")
        return [payload]
    half = len(batch) // 2
    return _fitting_payloads(encode, batch[:half], limit) + _fitting_payloads(encode, batch[half:], limit)


class RingReceiver(Operator):
    """Shared-memory ring ``ring_name`` → output port 0."""

    kind = Kind.COROUTINE  # the engine's own ends of a ring

    def __init__(self, ring_name: str, max_records: int = 16, peer: str = "", prefault: bool = True):
        super().__init__(inputs=0, outputs=1)
        self.ring_name = ring_name
        self.prefault = prefault
        """Map the ring's pages on open (False: as the reads first touch them, for a ring that may stay unused)."""
        self.peer = peer
        """The operator whose outputs its ring carries from the other process."""
        self.max_records = max_records
        self.ring: Any = None
        self._waiter: Any = None
        self.codec = PickleCodec()
        self._last_data = 0.0

    def open(self, ctx) -> None:
        self.ring = SharedRing.attach(self.ring_name, prefault=self.prefault)
        self._waiter = self.ring.read_waiter()
        self._last_data = 0.0

    async def process(self, ctx) -> None:
        out = ctx.outputs[0]
        ring = self.ring
        decode = self.codec.decode_batch
        while not ctx.shutdown_requested:
            records = ring.try_read(self.max_records)
            if records:
                for _target, payload in records:
                    await out.push_many(decode(payload))
                self._last_data = perf_counter()
                continue
            if ring.at_eof:
                if ring.aborted:
                    # The producing process was stopped: this process stops too, instead of ending its
                    # operators as if the stream were complete (a merge would miss batches, a sink flush).
                    ctx.request_shutdown()
                break
            await self._wait_for_data(ctx, ring)

    async def _wait_for_data(self, ctx, ring: Any) -> None:
        """Nap on a timer while this process is busy; park on the poller while it is idle.

        In a busy process (other operators waiting for a worker) a timer is
        served between two activations at no cost, while every poller wake-up
        would take the GIL from the computing worker. In an idle one (nothing
        else ready, or a nap that ended on time) the poller sleeps on the
        ring's wake pipe, which the producer pokes after publishing: the lowest
        latency, and the worker thread can sleep. An idle ring (nothing for IDLE_S: the ring of a
        replica held ready, a quiet stream) parks on the poller whatever the process does: its
        producer pokes the pipe only when there is something to read, while a nap every millisecond
        would put one more activation between the busy operators' (on a latency-bound flow, ahead
        of the next tuple).
        """
        if ctx.others_ready and perf_counter() - self._last_data < IDLE_S:
            t0 = perf_counter()
            await ctx.sleep(NAP_S)
            if perf_counter() - t0 >= 2 * NAP_S:
                return  # the process stayed busy: look at the ring again, then nap again
        if not ring.wait_readable(0) and not ring.at_eof:
            await ctx.wait_external(lambda: ring.wait_readable(0) or ring.at_eof, waiter=self._waiter)

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
