"""The typed messages of a multi-process run and the control channel's bookkeeping, without processes."""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

from elastream.errors import OperatorError
from elastream.processes.control import PendingReplies, target_process
from elastream.processes.messages import (Control, ControlResult, Done, Failed, RingsReady, Shutdown, Started,
                                          receive, send)
from elastream.runtime.decisions import MoveKeyGroups, SetReplicas, SetThreads
from elastream.runtime.handle import RunHandle, RunResult

pytestmark = pytest.mark.timeout(30)

MESSAGES = [Started(42), Done({"out": [1, (2, "x")]}, None, True), RingsReady(), Shutdown(),
            Control(SetThreads(3, process=1, reason="r"), ticket=7), ControlResult(7, False, "why"),
            Failed("m", "ValueError", "boom", "Traceback ...", outputs={"out": [lambda: None]})]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_crosses_a_pipe_as_itself(message):
    a, b = mp.Pipe(duplex=True)
    try:
        send(a, message)
        got = receive(b)
    finally:
        a.close()
        b.close()
    assert type(got) is type(message)
    if not isinstance(message, Failed):  # a lambda in the outputs compares by identity
        assert got == message


def test_a_failure_is_described_from_the_operator_error():
    cause = ValueError("boom")
    error = OperatorError("m", cause, "details", partial=RunResult({"out": [1]}, stats=None, elapsed_s=0.0))
    error.__cause__ = cause
    failed = Failed.of(error, None, "<process 1>")
    assert (failed.operator, failed.error_type, failed.message, failed.outputs) == ("m", "ValueError", "boom",
                                                                                     {"out": [1]})
    assert failed.error is None and Failed.of(error, None, "<process 1>", keep=True).error is error
    other = Failed.of(KeyError("k"), None, "<process 1>")
    assert other.operator == "<process 1>" and other.error_type == "KeyError" and "KeyError" in other.details


def test_decisions_go_to_the_process_that_hosts_them():
    assignment = {"src": 0, "x#split": 1, "x#0": 0, "x#1": 1}
    assert target_process(SetThreads(2, process=1), assignment) == 1
    assert target_process(SetReplicas("x", 1), assignment) == 1
    assert target_process(MoveKeyGroups("x", (3,), target=0), assignment) == 1
    assert "not replicated" in target_process(SetReplicas("src", 2), assignment)


def test_pending_replies_are_answered_abandoned_or_time_out():
    replies = PendingReplies()
    first, second, third = replies.expect(1), replies.expect(1), replies.expect(2)
    answering = threading.Thread(target=replies.answer, args=(ControlResult(first, True),))
    answering.start()
    assert replies.wait(first) == ControlResult(first, True)
    answering.join()
    replies.abandon(1, "process 1 has ended")
    assert replies.wait(second) == ControlResult(second, False, "process 1 has ended")
    assert "did not answer within 0.01 s" in replies.wait(third, timeout=0.01).why
    replies.answer(ControlResult(third, True))  # too late: dropped


def test_the_process_handle_is_a_run_handle():
    from elastream.processes.supervisor import ProcessRunHandle

    for name in ("wait", "shutdown", "request_shutdown", "stats", "states", "set_threads", "submit"):
        assert callable(getattr(ProcessRunHandle, name)), name
    assert isinstance(ProcessRunHandle.finished, property)
    assert set(RunHandle.__protocol_attrs__ if hasattr(RunHandle, "__protocol_attrs__") else ()) <= set(
        dir(ProcessRunHandle))
