"""The external poller (elastream.runtime.poller): probes, back-off, and sleeping on waiters' fds.

* A task whose waiter's fd becomes readable is woken at once, and the poller
  does not re-check its probe on a timer meanwhile (an idle flow costs no wake-ups).
* Every round arms the waiters before its last look at the probes (no lost
  wake-up) and disarms them after.
* Without a waiter (or one that cannot be slept on) the probes are re-checked
  with back-off; stopping closes the poller's own pipe.
* A real ring: its reader's waiter wakes the poller when another process writes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

import pytest

from elastream.ipc.ring import SharedRing
from elastream.runtime.poller import WAITER_TIMEOUT_S, ExternalPoller

pytestmark = pytest.mark.timeout(60)


class Sched:
    """What the poller needs of a scheduler: wake_external."""

    def __init__(self):
        self.woken = []
        self.event = threading.Event()

    def wake_external(self, task):
        self.woken.append((task, time.perf_counter()))
        self.event.set()


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

    poller = ExternalPoller(sched)
    try:
        poller.register("task", probe, waiter)
        time.sleep(0.12)
        idle_probes = probes[0]
        assert idle_probes <= 2 * (2 + 0.12 / WAITER_TIMEOUT_S)  # two looks per safety timeout, not per back-off
        assert waiter.arms >= 1 and waiter.disarms == waiter.arms - 1  # armed now, every earlier round disarmed
        flag[0] = True
        t0 = time.perf_counter()
        os.write(waiter.w, b"x")
        assert sched.event.wait(5)
        assert sched.woken[0][0] == "task" and sched.woken[0][1] - t0 < 0.04
    finally:
        poller.stop()
    assert waiter.disarms == waiter.arms
    assert poller._kick_r == -1 and poller._kick_w == -1  # its pipe is closed


def test_probes_are_checked_after_arming_so_no_wake_up_is_lost():
    sched, flag = Sched(), [False]

    class RacingWaiter(PipeWaiter):
        def arm(self):
            flag[0] = True  # "published" between the poller's last look and its sleep; nobody writes the fd
            return super().arm()

    poller = ExternalPoller(sched)
    try:
        poller.register("task", lambda: flag[0], RacingWaiter())
        assert sched.event.wait(WAITER_TIMEOUT_S / 2)  # well before the safety timeout
    finally:
        poller.stop()


@pytest.mark.parametrize("waiter", [None, PipeWaiter(sleepable=False)], ids=["no waiter", "cannot sleep"])
def test_without_a_sleepable_waiter_the_probes_back_off(waiter):
    sched, flag, probes = Sched(), [False], [0]

    def probe():
        probes[0] += 1
        return flag[0]

    poller = ExternalPoller(sched, min_sleep_s=1e-4, max_sleep_s=2e-3)
    try:
        poller.register("task", probe, waiter)
        time.sleep(0.1)
        assert probes[0] >= 20  # re-checked on a timer (1-2 ms at most apart)
        flag[0] = True
        assert sched.event.wait(5)
    finally:
        poller.stop()


def _publish_later(name: str, delay: float) -> None:
    ring = SharedRing.attach(name)
    ring.register_producer()
    time.sleep(delay)
    assert ring.try_write_batch([b"hello"])
    ring.close_producer()
    ring.close()


def test_a_rings_reader_sleeps_until_another_process_publishes():
    ring = SharedRing.create(1 << 16, producers=1)
    try:
        assert ring.try_read(1) == []  # this handle becomes the consumer (its wake pipe exists)
        sched = Sched()
        poller = ExternalPoller(sched)
        try:
            poller.register("reader", lambda: ring.wait_readable(0), ring.read_waiter())
            proc = mp.get_context("spawn").Process(target=_publish_later, args=(ring.name, 0.3))
            proc.start()
            assert sched.event.wait(20)
            proc.join(20)
            assert proc.exitcode == 0
            assert [bytes(p) for _, p in ring.try_read(4)] == [b"hello"]
        finally:
            poller.stop()
    finally:
        ring.close()
        ring.unlink()
