"""The external poller (elastream.runtime.poller): probes, back-off, and sleeping on waiters' fds.

* A task whose waiter's fd becomes readable is woken at once, and the poller
  does not re-check its probe on a timer meanwhile (an idle flow costs no wake-ups).
* Every round arms the waiters before its last look at the probes (no lost
  wake-up) and disarms them after.
* Without a waiter (or one that cannot be slept on) the probes are re-checked
  with back-off; stopping closes the poller's own pipe.
* A real ring: its reader's waiter wakes the poller when another process writes.
* While every worker is busy, the workers look at the probes between activations (rate-limited,
  never beside the thread) and the thread sleeps until a worker goes idle.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from elastream.ipc.ring import SharedRing
from elastream.runtime.poller import INLINE_POLL_S, WAITER_TIMEOUT_S, ExternalPoller

pytestmark = pytest.mark.timeout(60)


class Sched:
    """What the poller needs of a scheduler: wake_external."""

    def __init__(self, log=None):
        self.woken = []
        self.event = threading.Event()
        self.log = [] if log is None else log

    def wake_external(self, task):
        self.woken.append(task)
        self.log.append(("woken", task))
        self.event.set()


class RecordingPoller(ExternalPoller):
    """Records every sleep (the fds and the timeout) in ``log``; ``slept`` is notified after each one."""

    def __init__(self, sched, **kw):
        super().__init__(sched, **kw)
        self.log = sched.log
        self.slept = threading.Condition()

    def _sleep(self, fds, timeout):
        with self.slept:
            self.log.append(("sleep", tuple(fds), timeout))
            self.slept.notify_all()
        super()._sleep(fds, timeout)

    def sleeps(self):
        return [entry[1:] for entry in list(self.log) if entry[0] == "sleep"]

    def wait_for_sleeps(self, pred, timeout=10.0):
        with self.slept:
            assert self.slept.wait_for(lambda: pred(self.sleeps()), timeout), self.sleeps()


class PipeWaiter:
    """A waiter over an os.pipe; counts arms and disarms."""

    def __init__(self, sleepable=True):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.sleepable = sleepable
        self.arms = self.disarms = 0

    def arm(self):
        self.arms += 1
        return self.r if self.sleepable else None

    def disarm(self):
        self.disarms += 1
        try:
            os.read(self.r, 100)
        except BlockingIOError:
            pass


def test_a_waiters_fd_wakes_the_task_and_nothing_polls_meanwhile():
    sched, waiter, flag, probes = Sched(), PipeWaiter(), [False], [0]

    def probe():
        probes[0] += 1
        return flag[0]

    poller = RecordingPoller(sched)
    try:
        poller.register("task", probe, waiter)
        poller.wait_for_sleeps(lambda sleeps: len(sleeps) >= 2)  # two rounds asleep on the fd
        # every sleep is on the waiter's fd with the safety timeout, none a back-off sleep on a timer
        assert all(fds == (waiter.r,) and timeout == WAITER_TIMEOUT_S for fds, timeout in poller.sleeps())
        assert waiter.arms >= 1 and waiter.disarms >= waiter.arms - 1  # every earlier round disarmed
        flag[0] = True
        os.write(waiter.w, b"x")
        assert sched.event.wait(10)
        assert sched.woken == ["task"]
    finally:
        poller.stop()
    rounds = waiter.arms
    assert probes[0] <= 2 * rounds + 2  # a look before arming and one after, per round: no polling loop
    assert waiter.disarms == waiter.arms
    assert poller._kick_r == -1 and poller._kick_w == -1  # its pipe is closed


def test_probes_are_checked_after_arming_so_no_wake_up_is_lost():
    sched, flag = Sched(), [False]

    class RacingWaiter(PipeWaiter):
        def arm(self):
            flag[0] = True  # "published" between the poller's last look and its sleep; nobody writes the fd
            return super().arm()

    waiter = RacingWaiter()
    poller = RecordingPoller(sched)
    try:
        poller.register("task", lambda: flag[0], waiter)
        assert sched.event.wait(10)
    finally:
        poller.stop()
    # woken by the look after arming: the poller never slept on the waiter's fd (it would have waited for
    # the safety timeout, as nobody writes to it)
    log = sched.log
    first_wake = log.index(("woken", "task"))
    assert not any(e[0] == "sleep" and e[1] == (waiter.r,) for e in log[:first_wake])
    assert waiter.arms == waiter.disarms == 1


@pytest.mark.parametrize("sleepable", [None, False], ids=["no waiter", "cannot sleep"])
def test_without_a_sleepable_waiter_the_probes_back_off(sleepable):
    sched, flag, probes = Sched(), [False], [0]
    waiter = None if sleepable is None else PipeWaiter(sleepable=False)

    def probe():
        probes[0] += 1
        return flag[0]

    poller = RecordingPoller(sched, min_sleep_s=1e-4, max_sleep_s=2e-3)
    try:
        poller.register("task", probe, waiter)
        poller.wait_for_sleeps(lambda sleeps: len([s for s in sleeps if s[1] is not None]) >= 7)
        timed = [timeout for fds, timeout in poller.sleeps() if timeout is not None]
        assert all(fds == () for fds, _ in poller.sleeps())  # never on an fd
        # doubling from min_sleep_s, capped at max_sleep_s
        assert timed[:7] == pytest.approx([1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3, 2e-3, 2e-3])
        assert probes[0] >= 7  # a look per round
        flag[0] = True
        assert sched.event.wait(10)
    finally:
        poller.stop()
    assert sched.woken == ["task"]


def _publish_when_told(name: str, go) -> None:
    ring = SharedRing.attach(name)
    ring.register_producer()
    assert go.wait(20)  # the parent saw its poller asleep on the reader's fd
    assert ring.try_write_batch([b"hello"])
    ring.close_producer()
    ring.close()


def test_a_rings_reader_sleeps_until_another_process_publishes():
    ring = SharedRing.create(1 << 16, producers=1)
    try:
        assert ring.try_read(1) == []  # this handle becomes the consumer (its wake pipe exists)
        sched = Sched()
        poller = RecordingPoller(sched)
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        try:
            poller.register("reader", lambda: ring.wait_readable(0), ring.read_waiter())
            proc = ctx.Process(target=_publish_when_told, args=(ring.name, go))
            proc.start()
            poller.wait_for_sleeps(lambda sleeps: any(fds for fds, _ in sleeps))  # asleep on the reader's fd
            go.set()
            assert sched.event.wait(20)
            proc.join(20)
            assert proc.exitcode == 0
            assert [bytes(p) for _, p in ring.try_read(4)] == [b"hello"]
        finally:
            poller.stop()
    finally:
        ring.close()
        ring.unlink()


class BusySched(Sched):
    """A scheduler whose one worker is busy (``idle_workers`` 0): the poller leaves the probes to it."""

    def __init__(self):
        super().__init__()
        self.busy_workers, self.idle_workers = 1, 0


def test_while_every_worker_is_busy_the_thread_leaves_the_probes_to_them():
    sched, flag, probes = BusySched(), [False], [0]

    def probe():
        probes[0] += 1
        return flag[0]

    poller = RecordingPoller(sched)
    poller.inline = True
    try:
        poller.register("task", probe, PipeWaiter())
        poller.wait_for_sleeps(lambda sleeps: ((), WAITER_TIMEOUT_S) in sleeps)  # on its kick pipe alone
        assert probes[0] == 0 and poller.passive
        flag[0] = True
        assert not sched.event.wait(0.05)  # nobody looks but the workers
        assert poller.take_ready(now=1.0) == ["task"] and sched.woken == []
        # a worker going idle hands the probes back to the thread
        flag2 = [False]
        poller.register("task2", lambda: flag2[0], PipeWaiter())
        sched.busy_workers, sched.idle_workers = 0, 1
        poller.worker_idle()
        flag2[0] = True
        assert sched.event.wait(10) and sched.woken == ["task2"]
    finally:
        poller.stop()


def test_a_workers_look_comes_at_most_every_inline_poll_s_and_never_beside_the_threads():
    sched, probes = BusySched(), [0]

    def probe():
        probes[0] += 1
        return False

    poller = RecordingPoller(sched)
    poller.inline = True
    try:
        poller.register("task", probe, PipeWaiter())
        poller.wait_for_sleeps(lambda sleeps: ((), WAITER_TIMEOUT_S) in sleeps)
        assert poller.take_ready(now=1.0) == [] and probes[0] == 1
        assert poller.take_ready(now=1.0 + INLINE_POLL_S / 2) == [] and probes[0] == 1  # too soon
        assert poller.take_ready(now=1.0 + INLINE_POLL_S / 2, force=True) == [] and probes[0] == 2
        with poller._probing:  # the thread is running the probes (a ring sender's probe writes)
            assert poller.take_ready(now=5.0, force=True) == [] and probes[0] == 2
    finally:
        poller.stop()
