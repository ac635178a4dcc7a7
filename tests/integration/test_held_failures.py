"""Plain ``Runner()`` with processes held ready: a killed worker, an operator error and a shutdown while
key groups move to a joining replica end the run cleanly, name the cause and leave nothing behind."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.processes.worker_death import WorkerProcessError
from elastream.runtime.decisions import SetReplicas
from test_process_exits import assert_only_the_fork_server_remains, other_children  # noqa: F401 (autouse fixture)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow,
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]


def keyed(fail_at: int | None = None, n: int | None = None) -> es.Flow:
    """src (endless, or ``n`` tuples) → key_by → running count "x" (raising at ``fail_at``) → Callback."""
    def count(state, e):
        if e[1] == fail_at:
            raise ValueError(f"bad record {e[1]}")
        return state + 1, [(e[0], state + 1)]

    source = iter(range(n)) if n is not None else iter(int, 1)
    flow = es.Flow("held-failures")
    (flow.source(lambda: ((i % 53, i) for i, _ in enumerate(source)), name="src")
         .key_by(lambda e: e[0]).process(count, state=int, name="x")
         .sink(es.ops.Callback(lambda e: None), name="out"))
    return flow


def flowing(handle, wait_until) -> None:
    wait_until(lambda: handle.stats().operators.get("out") and handle.stats().operators["out"].tuples_in > 1000,
               timeout=30, what="tuples reaching the sink")


def test_sigkill_of_the_held_worker_while_key_groups_move_to_it(wait_until):
    handle = es.Runner().start(keyed())
    flowing(handle, wait_until)
    assert handle.submit([SetReplicas("x", 2, reason="test")])[0].ok  # the held worker starts now
    wait_until(lambda: handle.inner.worker_pids[1:] and handle.inner.worker_pids[1], timeout=30,
               what="the held worker started")
    killing_the_worker_fails_the_run_cleanly(handle)


def killing_the_worker_fails_the_run_cleanly(handle) -> None:
    """SIGKILL process 1: the run fails naming the signal, its loop thread ends, no process is left behind."""
    os.kill(handle.inner.worker_pids[1], signal.SIGKILL)
    with pytest.raises(WorkerProcessError) as info:
        handle.wait(timeout=30)
    assert info.value.exitcode == -signal.SIGKILL
    assert not handle.loop._thread.is_alive()
    assert_only_the_fork_server_remains("forkserver")


def test_an_operator_error_after_replicas_joined_names_the_operator(wait_until):
    handle = es.Runner().start(keyed(fail_at=200_000))
    flowing(handle, wait_until)
    assert handle.submit([SetReplicas("x", 2, reason="test")])[0].ok
    with pytest.raises(es.OperatorError) as info:
        handle.wait(timeout=60)
    assert "x" in str(info.value) and "bad record 200000" in str(info.value)
    assert_only_the_fork_server_remains("forkserver")


def test_shutdown_while_key_groups_move_ends_cleanly(wait_until):
    handle = es.Runner().start(keyed())
    flowing(handle, wait_until)
    answers = []
    mover = threading.Thread(target=lambda: answers.extend(
        handle.submit([SetReplicas("x", 2)]) + handle.submit([SetReplicas("x", 1)]) + handle.submit([SetReplicas("x", 2)])))
    mover.start()
    result = handle.shutdown(timeout=30)
    mover.join(10)
    assert result.shutdown and not mover.is_alive()
    assert len(answers) == 3  # every decision answered, applied or not
    assert_only_the_fork_server_remains("forkserver")
