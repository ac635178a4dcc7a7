"""Worker-process entry point: run one part of a split flow with the core engine.

The parent starts this with the ``spawn`` (or ``forkserver``) method and talks to
it over one duplex pipe. Messages (cloudpickled tuples):

* child → parent: ``("stats", FlowStats)`` every stats period,
  ``("done", outputs, FlowStats, shutdown)`` or
  ``("failed", operator, error_type, message, details, FlowStats)`` at the end;
* parent → child: ``("shutdown",)``, ``("threads", n)``.

The child ignores SIGINT: Ctrl-C reaches the whole process group, and the
parent turns it into an orderly shutdown of every child.
"""

from __future__ import annotations

import os
import signal
import traceback
from time import perf_counter
from typing import Any

import cloudpickle

from elastream.errors import OperatorError

STATS_TO_PARENT_S = 0.5
#: How often the control loop checks whether the flow ended (a wake-up costs microseconds).
END_POLL_S = 0.01


def send(conn: Any, message: tuple) -> None:
    """Send one cloudpickled message (user objects may need cloudpickle)."""
    conn.send_bytes(cloudpickle.dumps(message))


def receive(conn: Any) -> tuple:
    """Receive one message sent with :func:`send`."""
    return cloudpickle.loads(conn.recv_bytes())


def child_main(index: int, payload: bytes, conn: Any) -> None:
    """Run part ``index`` of the flow described by ``payload`` (a cloudpickled ChildSpec)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from elastream.processes.spec import build_child_flow
    from elastream.runtime.runner import Runner

    try:
        spec = cloudpickle.loads(payload)
        if not spec.operators:
            # A placement may leave a process without operators (more processes than work): nothing to run.
            send(conn, ("started", os.getpid()))
            send(conn, ("done", {}, None, False))
            return
        flow = build_child_flow(spec)
        handle = Runner(**spec.runner).start(flow)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        send(conn, ("failed", f"<process {index}>", type(exc).__name__, str(exc), traceback.format_exc(), None))
        return
    send(conn, ("started", os.getpid()))
    # Snapshots cost ~0.5 ms of this process's CPU (and a GIL switch): a few per second suffice.
    period = max(spec.runner.get("stats_period_ms", 100.0) / 1000.0, STATS_TO_PARENT_S)
    next_stats = perf_counter() + period
    while not handle.done:
        try:
            # Short polls: the end of the flow is noticed within END_POLL_S, not a whole stats period.
            if conn.poll(END_POLL_S):
                _obey(handle, receive(conn))
            elif perf_counter() >= next_stats:
                send(conn, ("stats", handle.stats()))
                next_stats = perf_counter() + period
        except (EOFError, OSError):
            handle.sched.request_shutdown()  # the parent is gone: stop, nobody will read results
            break
    try:
        result = handle.wait()
    except OperatorError as exc:
        cause = exc.__cause__
        send(conn, ("failed", exc.operator, type(cause).__name__, str(cause), exc.details, handle.stats()))
        return
    except BaseException as exc:  # noqa: BLE001
        send(conn, ("failed", f"<process {index}>", type(exc).__name__, str(exc), traceback.format_exc(),
                    handle.stats()))
        return
    send(conn, ("done", result.outputs, result.stats, result.shutdown))


def _obey(handle: Any, message: tuple) -> None:
    kind = message[0]
    if kind == "shutdown":
        handle.sched.request_shutdown()
    elif kind == "threads":
        handle.set_threads(int(message[1]))
