"""The worker process's control loop sleeps until the parent writes, the flow ends, or stats are due.

The run's end reaches a waiting ``select`` through one helper, :class:`EndSignal` (a worker's
control loop and the parent's local part both use it).
"""

from __future__ import annotations

import select
import threading

import pytest

from elastream.processes.end_signal import EndSignal
from elastream.processes.supervisor import WATCH_S
from elastream.runtime.handle import WAIT_CHECK_S, wait_slice

pytestmark = pytest.mark.timeout(30)


def test_end_signal_becomes_readable_once_the_flow_has_finished():
    finished = threading.Event()
    ended = EndSignal(finished)
    try:
        assert select.select([ended.fd], [], [], 0.05)[0] == []
        finished.set()
        assert select.select([ended.fd], [], [], 5.0)[0] == [ended.fd]
    finally:
        ended.close()
    assert not ended._thread.is_alive()


def test_end_signal_closes_without_an_end():
    ended = EndSignal(threading.Event())
    ended.close()
    assert not ended._thread.is_alive()


def test_waits_are_sliced_by_the_deadline():
    from time import perf_counter

    assert wait_slice(None, WATCH_S) == WATCH_S and wait_slice(None) == WAIT_CHECK_S
    assert wait_slice(perf_counter() - 1.0) == 0.0
    assert 0.0 < wait_slice(perf_counter() + 0.1, WATCH_S) <= 0.1


def test_end_signal_closes_once_and_an_already_set_one_is_readable():
    ended = EndSignal.already_set()
    try:
        assert select.select([ended.fd], [], [], 5.0)[0] == [ended.fd]
    finally:
        ended.close()
    ended.close()  # a second close leaves descriptors reused since alone
    assert not ended._thread.is_alive()
