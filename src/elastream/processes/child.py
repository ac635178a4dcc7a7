"""Worker-process entry point: run one part of a split flow with the core engine.

The parent starts :func:`child_main` with the ``forkserver`` (or ``spawn``)
method and talks to it over one duplex pipe with the messages of
:mod:`elastream.processes.messages`: the worker waits for
:class:`~elastream.processes.messages.RingsReady` before it attaches any ring,
sends ``Started``, then a ``Stats`` every reporting period, answers each
``Control`` (a reconfiguration decision, applied here with the part's
``handle.submit``) with a ``ControlResult``, obeys ``Shutdown``, and ends with
one ``Done`` or ``Failed``.

Threading: the worker's main thread owns the pipe and runs the control loop
(:class:`_ControlLoop`); the flow runs on the engine's worker threads. The
loop sleeps until the parent writes, the flow ends (an
:class:`~elastream.processes.end_signal.EndSignal`) or statistics are due.
The child ignores SIGINT: Ctrl-C reaches the whole process group, and the
parent turns it into an orderly shutdown of every child.

Importing this module also does the one-time work every worker would
otherwise do before its first tuple (:func:`warm_up`): the fork server
imports it, so workers forked from it start warm.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from multiprocessing.connection import wait as wait_ready
from time import perf_counter
from typing import Any

import cloudpickle

from elastream.processes.control import apply_in_part
from elastream.processes.end_signal import EndSignal
from elastream.processes.forkserver import set_up_fork_server
from elastream.processes.fused_members import replicated_chains, with_members
from elastream.processes.messages import (Control, Done, Failed, Final, ParentMessage, RingsReady, Shutdown,
                                          Started, Stats, receive, send)

STATS_TO_PARENT_S = 0.5


def warm_up() -> None:
    """Import and initialise what building and running a part needs, once per process.

    Measured on the 2-vCPU VM with a fork server (no ``.pyc`` files are written here, so every
    import compiles): the policy registry's built-in modules (~6 ms), the flow validator, and the
    cffi signatures of the ring's atomics (~5 ms, in the worker thread that attaches the first
    ring) were paid again by every worker forked from a server that had not done them.
    """
    from elastream.graph import validate  # noqa: F401 - Flow.validate imports it lazily
    from elastream.ipc._sync import warm_up as warm_up_atomics
    from elastream.policies.registry import available

    available()
    warm_up_atomics()


def child_main(index: int, payload: bytes, conn: Any, environ: dict[str, str] | None = None) -> None:
    """Run part ``index`` of the flow described by ``payload`` (a cloudpickled ChildSpec).

    ``environ``, when given, is the parent's environment as it was when it started this
    worker: a worker forked from the fork server would otherwise see the server's, from
    whenever the first run started it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if environ is not None:
        adopt_environment(environ)
    from elastream.processes.spec import build_child_flow
    from elastream.runtime.engine import start_threads

    try:
        spec = cloudpickle.loads(payload)
        if not spec.operators:
            # A placement may leave a process without operators (more processes than work): nothing to run.
            send(conn, Started(os.getpid()))
            send(conn, Done())
            return
        flow = build_child_flow(spec)
        early = _wait_for_rings(conn)
        if early is None:
            return  # the parent is gone
        if any(isinstance(message, Shutdown) for message in early):
            send(conn, Started(os.getpid()))
            send(conn, Done(shutdown=True))
            return
        handle = start_threads(flow, spec.config)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        send(conn, Failed.of(exc, None, f"<process {index}>"))
        return
    send(conn, Started(os.getpid()))
    # Snapshots cost ~0.5 ms of this process's CPU (and a GIL switch): a few per second suffice.
    chains = replicated_chains(spec.operators)
    loop = _ControlLoop(conn, handle, max(spec.config.scheduling.stats_period_ms / 1000.0, STATS_TO_PARENT_S),
                        chains)
    for message in early:
        loop.dispatch(message)
    loop.run()
    send(conn, final_message(handle, f"<process {index}>", chains))


def final_message(handle: Any, where: str, chains: dict[str, tuple[str, ...]] | None = None) -> Final:
    """Wait for a part's threads handle and describe how it ended (``where`` names a failure outside operators).

    ``chains``: the replicas of fused chains the part runs, whose members its statistics list too.
    """
    chains = chains or {}
    try:
        result = handle.wait()
    except BaseException as exc:  # noqa: BLE001 - reported as the part's failure
        return Failed.of(exc, with_members(handle.stats(), handle, chains), where)
    return Done(result.outputs, with_members(result.stats, handle, chains), result.shutdown)


def adopt_environment(environ: dict[str, str]) -> None:
    """Make ``os.environ`` equal ``environ`` (before the spec's unpickling imports user modules)."""
    for name in [n for n in os.environ if n not in environ]:
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _wait_for_rings(conn: Any) -> list[ParentMessage] | None:
    """Block until the parent says the rings exist; return what else it sent first (None: it is gone).

    The parent sends :class:`RingsReady` right after creating them, or dies (then the pipe
    ends); a :class:`Shutdown` (or a decision) sent meanwhile is returned for the caller to obey.
    """
    early: list[ParentMessage] = []
    try:
        while True:
            message = receive(conn)
            if isinstance(message, RingsReady):
                return early
            early.append(message)
            if isinstance(message, Shutdown):
                return early
    except (EOFError, OSError):
        return None


class _ControlLoop:
    """Obey the parent and send statistics every ``period`` until the flow ends (or the parent is gone).

    ``chains`` (replica name → member names) are the replicated fused chains the part runs:
    its statistics list their members too (:mod:`~elastream.processes.fused_members`).
    """

    def __init__(self, conn: Any, handle: Any, period: float, chains: dict[str, tuple[str, ...]] | None = None):
        self.conn = conn
        self.handle = handle
        self.period = period
        self.chains = chains or {}
        self._handlers = {Shutdown: self._on_shutdown, Control: self._on_control, RingsReady: self._on_rings}

    def run(self) -> None:
        ended = EndSignal(self.handle.finished, name="elastream-child-end")
        try:
            self._loop(ended.fd)
        finally:
            ended.close()

    def _loop(self, end_fd: int) -> None:
        next_stats = perf_counter() + self.period
        while not self.handle.done:
            try:
                ready = wait_ready([self.conn, end_fd], timeout=max(0.0, next_stats - perf_counter()))
                if self.conn in ready:
                    while self.conn.poll():
                        self.dispatch(receive(self.conn))
                if perf_counter() >= next_stats and not self.handle.done:
                    send(self.conn, self.stats())
                    next_stats = perf_counter() + self.period
            except (EOFError, OSError):
                self.handle.request_shutdown()  # the parent is gone: stop, nobody will read results
                return

    def stats(self) -> Stats:
        """The part's statistics message now."""
        return Stats(with_members(self.handle.stats(), self.handle, self.chains))

    def dispatch(self, message: ParentMessage) -> None:
        """Hand ``message`` to its handler."""
        self._handlers[type(message)](message)

    def _on_shutdown(self, message: Shutdown) -> None:
        self.handle.request_shutdown()

    def _on_control(self, message: Control) -> None:
        result = apply_in_part(self.handle, message.decision)
        # The statistics first: once the parent has the answer, its view already shows the change.
        send(self.conn, self.stats())
        send(self.conn, replace(result, ticket=message.ticket))

    def _on_rings(self, message: RingsReady) -> None:
        pass  # only meaningful before the start (see _wait_for_rings)


set_up_fork_server()
warm_up()
