"""Every exit path of a multi-process run joins every worker process and leaves no shared memory.

After a normal end, an operator's failure in a worker, a SIGKILLed worker,
Ctrl-C in the caller's wait and a failed start, the parent's only remaining
child is the fork server (none at all with ``start_method="spawn"``; Python's
own ``multiprocessing`` resource tracker, which shared memory needs, is not
counted), nothing is a zombie, and the fork server has no children left. The
autouse fixtures fail a test that leaks a ring segment or an engine thread.
"""

from __future__ import annotations

import os
import signal
import threading

import psutil
import pytest

import elastream as es
from elastream.processes import WorkerProcessError, forkserver, stop_fork_server, supervisor

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

METHODS = ["forkserver", "spawn"]


def resource_tracker_pid() -> int | None:
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None)


#: Children the test process had before each test that are none of the engine's (a Spark JVM another
#: suite started, say): they are not counted.
_OTHERS: set[int] = set()


@pytest.fixture(autouse=True)
def other_children():
    server = forkserver.fork_server_pid()
    _OTHERS.clear()
    _OTHERS.update(c.pid for c in psutil.Process().children() if c.pid != server)
    yield


def assert_only_the_fork_server_remains(start_method: str) -> None:
    children = [c for c in psutil.Process().children()
                if c.pid != resource_tracker_pid() and c.pid not in _OTHERS]
    assert not [c.pid for c in children if c.status() == psutil.STATUS_ZOMBIE]
    server = forkserver.fork_server_pid()
    if start_method == "spawn":
        assert server is None and children == []
        return
    assert [c.pid for c in children] == [server]
    assert psutil.Process(server).children() == []  # it has reaped every worker it forked


@pytest.fixture(params=METHODS)
def start_method(request) -> str:
    if request.param == "spawn":
        stop_fork_server()  # another test may have started it: a spawn run must leave nothing at all
    return request.param


def endless(sink=None) -> es.Flow:
    flow = es.Flow("endless")
    (flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x")
         .sink(sink or es.ops.Callback(lambda x: None), name="out"))
    return flow


def runner(start_method: str, **kw) -> es.Runner:
    return es.Runner(processes=2, process_options=es.ProcessConfig(start_method=start_method), **kw)


def start_flowing(start_method: str, wait_until) -> supervisor.ProcessRunHandle:
    handle = runner(start_method, placement={"src": 0, "x": 1, "out": 1}).start(endless())
    wait_until(lambda: handle.stats().operators.get("out") and handle.stats().operators["out"].tuples_in,
               timeout=30, what="tuples through the ring")
    return handle


def test_normal_end(start_method):
    flow = es.Flow("short")
    flow.source(range(1_000), name="src").map(lambda x: x * 2, name="x").sink(es.ops.Collect(), name="out")
    result = runner(start_method, placement={"src": 0, "x": 1, "out": 0}).run(flow, timeout=60)
    assert result.outputs["out"] == [2 * i for i in range(1_000)]
    assert_only_the_fork_server_remains(start_method)


def test_operator_failure_in_a_worker_carries_the_partial_result(start_method):
    def explode(x):
        if x == 300:
            raise ValueError("boom at 300")
        return x

    flow = es.Flow("failing")
    flow.source(range(100), name="ok_src").sink(es.ops.Collect(), name="ok_out")
    flow.source(range(1_000), name="src").map(explode, name="x").sink(es.ops.Collect(), name="out")
    placement = {"ok_src": 0, "ok_out": 0, "src": 0, "x": 1, "out": 1}
    with pytest.raises(es.OperatorError) as info:
        runner(start_method, placement=placement).run(flow, timeout=60)
    assert info.value.operator == "x" and "boom at 300" in str(info.value)
    partial = info.value.partial
    assert partial is not None and partial.outputs["ok_out"] == list(range(100))  # part 0 had finished
    got = partial.outputs["out"]  # what the failing part's sink had accepted when it stopped
    assert got == list(range(len(got))) and len(got) <= 300
    assert partial.stats.operators["x"].tuples_in >= 300
    assert_only_the_fork_server_remains(start_method)


def test_sigkill_of_a_worker(start_method, wait_until):
    handle = start_flowing(start_method, wait_until)
    os.kill(handle.worker_pids[1], signal.SIGKILL)
    with pytest.raises(WorkerProcessError) as info:
        handle.wait(timeout=10)
    assert info.value.exitcode == -signal.SIGKILL
    assert all(c.process.exitcode is not None for c in handle._children)  # joined
    assert_only_the_fork_server_remains(start_method)


def test_sigkill_of_a_worker_during_a_reconfiguration(start_method, wait_until):
    from elastream.runtime.decisions import SetThreads

    handle = start_flowing(start_method, wait_until)
    stop = threading.Event()
    answers: list = []

    def reconfigure() -> None:  # the elastic loop's part: thread-level decisions for process 1, back to back
        threads = 1
        while not stop.is_set():
            threads = 3 - threads
            answers.extend(handle.submit([SetThreads(threads, process=1, reason="test")]))

    changer = threading.Thread(target=reconfigure, name="test-reconfigure")
    changer.start()
    try:
        wait_until(lambda: sum(a.ok for a in answers) >= 3, timeout=30, what="reconfigurations applied")
        os.kill(handle.worker_pids[1], signal.SIGKILL)
        with pytest.raises(WorkerProcessError) as info:
            handle.wait(timeout=10)
    finally:
        stop.set()
        changer.join(10)
    assert info.value.exitcode == -signal.SIGKILL
    assert not changer.is_alive()  # decisions for a dead process come back answered, never hang
    assert all(c.process.exitcode is not None for c in handle._children)  # joined
    assert_only_the_fork_server_remains(start_method)


def test_ctrl_c_in_the_callers_wait(start_method, wait_until, monkeypatch):
    handle = start_flowing(start_method, wait_until)

    def interrupted(deadline, longest=0.5):
        raise KeyboardInterrupt  # as Ctrl-C arriving while the caller sleeps in wait()

    monkeypatch.setattr(supervisor, "wait_slice", interrupted)
    with pytest.raises(KeyboardInterrupt):
        handle.wait()
    assert handle.finished.is_set()
    assert_only_the_fork_server_remains(start_method)


def test_a_failed_start(start_method, monkeypatch):
    def refuse(spec):
        raise OSError("part 0 cannot start")

    monkeypatch.setattr(supervisor, "LocalPart", refuse)
    flow = es.Flow("short")
    flow.source(range(10), name="src").map(lambda x: x, name="x").sink(es.ops.Collect(), name="out")
    with pytest.raises(OSError, match="part 0 cannot start"):
        runner(start_method, placement={"src": 0, "x": 1, "out": 0}).run(flow, timeout=60)
    assert_only_the_fork_server_remains(start_method)


def test_the_fork_server_stops_on_request_and_not_under_a_run(wait_until):
    handle = start_flowing("forkserver", wait_until)
    try:
        with pytest.raises(RuntimeError, match="still use the fork server"):
            stop_fork_server()
    finally:
        handle.shutdown(timeout=10)
    server = forkserver.fork_server_pid()
    assert stop_fork_server() is True and forkserver.fork_server_pid() is None
    assert not psutil.pid_exists(server)  # joined: not even a zombie
    assert stop_fork_server() is False
    assert_only_the_fork_server_remains("spawn")
