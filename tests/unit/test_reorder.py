"""Reorder buffers (ordered-multicore §3): one contract over both schemes, plus the Fig. 4 specifics.

The contract suite is parametrised over every scheme in ``REORDER_SCHEMES``;
the lost-wake-up re-check (Fig. 4 L39–42) and "an adder never waits for the
sender" are tested deterministically by holding the sender inside ``emit``
or inside the flag's ``release``.
"""

from __future__ import annotations

import threading

import pytest

from elastream.ordered import (REORDER_SCHEMES, LockReorderBuffer, NonBlockingReorderBuffer, ReorderBuffer,
                               ReorderStats, SerialCounter, SerialQueue, make_reorder_buffer)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=REORDER_SCHEMES)
def scheme(request) -> str:
    return request.param


def _buffer(scheme: str, capacity: int = 8, first_serial: int = 0) -> tuple[ReorderBuffer, list]:
    out: list = []
    return make_reorder_buffer(scheme, capacity, out.extend, first_serial=first_serial), out


def _start(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, name="ordered-test-worker", daemon=True)
    t.start()
    return t


# --- contract: both schemes -------------------------------------------------------------------


def test_factory_builds_each_scheme_behind_the_protocol(scheme):
    rb, _ = _buffer(scheme)
    assert isinstance(rb, ReorderBuffer)
    assert rb.scheme == scheme and rb.capacity == 8
    assert type(rb) is {"nonblocking": NonBlockingReorderBuffer, "lock": LockReorderBuffer}[scheme]


def test_in_order_adds_are_emitted_at_once(scheme):
    rb, out = _buffer(scheme)
    for t in range(5):
        assert rb.try_add(t, [t])
        assert out == list(range(t + 1))
    assert rb.pending() == 0 and rb.next_serial == 5


def test_out_of_order_outputs_wait_for_the_earlier_serials(scheme):
    rb, out = _buffer(scheme)
    assert rb.try_add(2, ["c"]) and rb.try_add(1, ["b"])
    assert out == [] and rb.pending() == 2
    assert rb.try_add(0, ["a"])
    assert out == ["a", "b", "c"] and rb.pending() == 0


def test_serial_beyond_the_window_is_refused_and_accepted_later(scheme):
    rb, out = _buffer(scheme, capacity=2)
    assert rb.try_add(1, ["b"])
    assert not rb.try_add(2, ["c"])  # window is [0, 2)
    assert rb.pending() == 1 and out == []
    assert rb.try_add(0, ["a"])
    assert rb.try_add(2, ["c"])  # window moved to [2, 4)
    assert out == ["a", "b", "c"]
    assert rb.statistics().refused == 1


def test_filtered_input_keeps_its_serial_and_emits_nothing(scheme):
    calls: list = []
    rb = make_reorder_buffer(scheme, 4, calls.append)
    assert rb.try_add(1, ["b"]) and rb.try_add(0, [])
    assert calls == [["b"]]  # emit is not called for an empty output list
    assert rb.next_serial == 2
    stats = rb.statistics()
    assert (stats.emitted, stats.emitted_outputs) == (2, 1)


def test_several_outputs_of_one_input_share_one_serial_and_stay_together(scheme):
    calls: list = []
    rb = make_reorder_buffer(scheme, 4, calls.append)
    assert rb.try_add(1, ("x", "y", "z")) and rb.try_add(0, ["a", "b"])
    assert calls == [["a", "b"], ("x", "y", "z")]


def test_first_serial_offsets_the_window(scheme):
    rb, out = _buffer(scheme, capacity=2, first_serial=100)
    assert not rb.try_add(102, ["c"])
    assert rb.try_add(101, ["b"]) and rb.try_add(100, ["a"])
    assert out == ["a", "b"] and rb.next_serial == 102


def test_misuse_is_a_clear_error(scheme):
    rb, _ = _buffer(scheme)
    rb.try_add(0, ["a"])
    with pytest.raises(ValueError, match="already released"):
        rb.try_add(0, ["again"])
    rb.try_add(3, ["d"])
    with pytest.raises(ValueError, match="already added"):
        rb.try_add(3, ["again"])
    with pytest.raises(TypeError, match="use \\[\\] for none"):
        rb.try_add(4, None)
    with pytest.raises(ValueError, match="capacity"):
        make_reorder_buffer(scheme, 0, print)


def test_unknown_scheme_names_the_choices():
    with pytest.raises(ValueError, match="nonblocking, lock"):
        make_reorder_buffer("fifo", 4, print)


def test_statistics_is_a_frozen_snapshot(scheme):
    rb, _ = _buffer(scheme, capacity=4)
    rb.try_add(2, ["c"])
    rb.try_add(5, ["f"])  # refused
    rb.try_add(0, ["a"])
    stats = rb.statistics()
    assert isinstance(stats, ReorderStats)
    assert (stats.scheme, stats.capacity, stats.added, stats.refused) == (scheme, 4, 2, 1)
    assert (stats.emitted, stats.pending, stats.next_serial, stats.max_occupancy) == (1, 1, 1, 3)
    with pytest.raises(AttributeError):
        stats.added = 0  # type: ignore[misc]


def test_emit_failure_leaves_the_output_in_place(scheme):
    out: list = []
    failing = [True]

    def emit(outputs):
        if failing[0]:
            raise RuntimeError("downstream broke")
        out.extend(outputs)

    rb = make_reorder_buffer(scheme, 4, emit)
    assert rb.try_add(1, ["b"])
    with pytest.raises(RuntimeError, match="downstream broke"):
        rb.try_add(0, ["a"])
    assert rb.next_serial == 0 and rb.pending() == 2 and out == []
    failing[0] = False
    assert rb.flush() == 2
    assert out == ["a", "b"] and rb.pending() == 0


def test_threads_with_a_tiny_window_deliver_everything_in_order(scheme):
    """4 workers share a SerialQueue; refused outputs are kept and retried (never blocking)."""
    n, out = 3000, []
    rb = make_reorder_buffer(scheme, 3, out.extend)
    src = SerialQueue()
    src.put_many(range(n))

    def worker() -> None:
        held: list[tuple[int, list]] = []
        while True:
            held = [(t, o) for t, o in held if not rb.try_add(t, o)]
            got = src.take(2)
            if not got and not held:
                return
            held.extend((t, [x * 2]) for t, x in got)

    threads = [_start(worker) for _ in range(4)]
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "workers deadlocked"
    assert out == [2 * x for x in range(n)]
    stats = rb.statistics()
    assert (stats.added, stats.emitted, stats.pending) == (n, n, 0)


# --- Fig. 4 specifics -------------------------------------------------------------------------


def _sender_held_in_emit(scheme: str):
    """A reorder buffer whose sender is stuck inside ``emit`` of serial 0 until ``release`` is set."""
    entered, release = threading.Event(), threading.Event()
    out: list = []

    def emit(outputs):
        if outputs == ["a"]:
            entered.set()
            assert release.wait(10)
        out.extend(outputs)

    rb = make_reorder_buffer(scheme, 4, emit)
    sender = _start(rb.try_add, 0, ["a"])
    assert entered.wait(10)
    return rb, out, release, sender


def test_nonblocking_adder_returns_while_another_worker_is_sending():
    rb, out, release, sender = _sender_held_in_emit("nonblocking")
    assert rb.try_add(1, ["b"])  # returns at once: the flag is taken, so it leaves the sending to the sender
    assert out == [] and rb.statistics().contended >= 1
    release.set()
    sender.join(10)
    assert out == ["a", "b"]  # the sender picked up serial 1 in its drain loop


def test_lock_adder_waits_for_the_sender():
    """The Fig. 3 behaviour the non-blocking scheme removes: a finished worker waits for the mutex."""
    rb, out, release, sender = _sender_held_in_emit("lock")
    adder = _start(rb.try_add, 1, ["b"])
    adder.join(0.2)
    assert adder.is_alive()  # cannot finish: the sender holds the mutex until `release`
    release.set()
    sender.join(10)
    adder.join(10)
    assert out == ["a", "b"] and rb.statistics().contended == 1


class _FlagWithARaceInRelease:
    """A test-and-set flag whose ``release`` first lets another thread add serial 1.

    That is the interleaving Fig. 4's re-check exists for: the sender found
    slot 1 EMPTY, then (before it clears the flag) a worker stores serial 1
    and fails the test-and-set. Without the re-check, serial 1 would sit in
    the buffer until some later add.
    """

    def __init__(self, rb: NonBlockingReorderBuffer) -> None:
        self._flag = threading.Lock()
        self._rb = rb
        self.raced = False

    def acquire(self, blocking: bool = True) -> bool:
        return self._flag.acquire(blocking)

    def release(self) -> None:
        if not self.raced:
            self.raced = True
            adder = _start(self._rb.try_add, 1, ["b"])
            adder.join(10)
            assert not adder.is_alive()
        self._flag.release()


def test_nonblocking_recheck_after_clearing_the_flag_sends_the_late_output():
    out: list = []
    rb = NonBlockingReorderBuffer(4, out.extend)
    rb._flag = flag = _FlagWithARaceInRelease(rb)  # white-box: inject the interleaving
    assert rb.try_add(0, ["a"])
    assert flag.raced
    assert out == ["a", "b"], "the output stored during the clear was left behind (lost wake-up)"
    assert rb.pending() == 0 and rb.statistics().rechecks == 1


def test_flush_sends_what_a_busy_flag_left_behind():
    out: list = []
    rb = NonBlockingReorderBuffer(4, out.extend)
    assert rb._flag.acquire(False)  # white-box: another sender is active
    assert rb.try_add(0, ["a"]) and out == []
    rb._flag.release()
    assert rb.flush() == 1 and out == ["a"]


# --- serial numbers ---------------------------------------------------------------------------


def test_serial_counter_blocks_and_monotonicity():
    c = SerialCounter(first=5)
    assert c.take() == 5 and c.take(3) == 6 and c.peek() == 9
    c.advance_past(20)
    assert c.take() == 21
    with pytest.raises(ValueError, match="not increasing"):
        c.advance_past(3)
    with pytest.raises(ValueError):
        SerialCounter(first=-1)


def test_serial_queue_assigns_serials_in_enqueue_order_under_concurrency():
    q: SerialQueue[tuple[int, int]] = SerialQueue()

    def producer(pid: int) -> None:
        for i in range(500):
            q.put((pid, i)) if i % 2 else q.put_many([(pid, i)])

    threads = [_start(producer, pid) for pid in range(4)]
    for t in threads:
        t.join(30)
    taken = []
    while batch := q.take(64):
        taken.extend(batch)
    assert [s for s, _ in taken] == list(range(2000))
    for pid in range(4):  # each producer's items keep their order
        assert [i for _, (p, i) in taken if p == pid] == list(range(500))
    stats = q.statistics()
    assert (stats.puts, stats.taken, stats.backlog, stats.next_serial) == (2000, 2000, 0, 2000)


@pytest.mark.parametrize("module", ["elastream.ordered.serial", "elastream.ordered.reorder"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
