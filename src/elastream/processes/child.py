"""Worker-process entry point: run one part of a split flow with the core engine.

The parent starts this with the ``spawn`` (or ``forkserver``) method and talks to
it over one duplex pipe. Messages (cloudpickled tuples):

* child → parent: ``("stats", FlowStats)`` every stats period,
  ``("done", outputs, FlowStats, shutdown)`` or
  ``("failed", operator, error_type, message, details, FlowStats)`` at the end;
* parent → child: ``("rings",)`` once every ring exists (the parent creates them
  while the child boots; the child attaches none before), then
  ``("shutdown",)``, ``("threads", n)``.

The child ignores SIGINT: Ctrl-C reaches the whole process group, and the
parent turns it into an orderly shutdown of every child.

Importing this module also does the one-time work every worker would
otherwise do before its first tuple (:func:`warm_up`): the fork server
imports it, so workers forked from it start warm.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from multiprocessing.connection import wait as wait_ready
from time import perf_counter
from typing import Any

import cloudpickle

from elastream.errors import OperatorError

#: Environment variable with the parent's ``sys.path`` and the sources to compile (JSON) while it
#: starts a fork server (see :func:`_set_up_fork_server`).
FORKSERVER_SETUP_ENV = "ELASTREAM_FORKSERVER_SETUP"
STATS_TO_PARENT_S = 0.5
#: How often the end watcher re-checks whether it was told to stop (it normally just waits for the end).
END_CHECK_S = 0.5


def _set_up_fork_server() -> None:
    """In a fork server being started: adopt the parent's ``sys.path``, compile the sources it names.

    The path goes first (Python 3.11's fork server drops the one it is handed). The sources
    are the workers' own modules that must not be imported here (their import-time state
    would be shared by every worker): they are only compiled, and a worker importing one of
    them gets the code object when its source is byte for byte the same
    (:class:`_CompiledSources`), so it executes the module itself without compiling it
    (~4 ms for a 16 KB module on the VM, where no ``.pyc`` is written). The variable is
    removed at once, so the workers do not carry it on.
    """
    raw = os.environ.pop(FORKSERVER_SETUP_ENV, None)
    if not raw:
        return
    setup = json.loads(raw)
    parent = [p for p in setup.get("sys_path", []) if isinstance(p, str)]
    sys.path[:] = parent + [p for p in sys.path if p not in parent]
    sources = _CompiledSources.install()
    for path in setup.get("compile", []):
        sources.add(path)


class _CompiledSources:
    """Code objects compiled ahead, handed to ``SourceFileLoader`` for an identical source at the same path.

    Installed in a fork server only (the workers inherit it): ``source_to_code`` of
    ``importlib.machinery.SourceFileLoader`` looks here first; anything else compiles as usual.
    """

    _installed: _CompiledSources | None = None

    def __init__(self) -> None:
        self.code: dict[str, tuple[bytes, Any]] = {}

    @classmethod
    def install(cls) -> _CompiledSources:
        if cls._installed is None:
            from importlib.machinery import SourceFileLoader

            sources = cls()
            original = SourceFileLoader.source_to_code

            def source_to_code(loader: Any, data: Any, path: Any, *, _optimize: int = -1) -> Any:
                hit = sources.code.get(path) if _optimize == -1 else None
                if hit is not None and hit[0] == data:
                    return hit[1]
                return original(loader, data, path, _optimize=_optimize)

            SourceFileLoader.source_to_code = source_to_code  # type: ignore[method-assign]
            cls._installed = sources
        return cls._installed

    def add(self, path: str) -> None:
        """Compile ``path`` now, as the import system would (nothing if it cannot be read or compiled)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
            self.code[path] = (data, compile(data, path, "exec", dont_inherit=True))
        except (OSError, SyntaxError, ValueError):
            pass


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


def send(conn: Any, message: tuple) -> None:
    """Send one cloudpickled message (user objects may need cloudpickle)."""
    conn.send_bytes(cloudpickle.dumps(message))


def receive(conn: Any) -> tuple:
    """Receive one message sent with :func:`send`."""
    return cloudpickle.loads(conn.recv_bytes())


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
            send(conn, ("started", os.getpid()))
            send(conn, ("done", {}, None, False))
            return
        flow = build_child_flow(spec)
        early = _wait_for_rings(conn)
        if early is None:
            return  # the parent is gone
        if any(message[0] == "shutdown" for message in early):
            send(conn, ("started", os.getpid()))
            send(conn, ("done", {}, None, True))
            return
        handle = start_threads(flow, spec.config)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        send(conn, ("failed", f"<process {index}>", type(exc).__name__, str(exc), traceback.format_exc(), None))
        return
    for message in early:
        _obey(handle, message)
    send(conn, ("started", os.getpid()))
    # Snapshots cost ~0.5 ms of this process's CPU (and a GIL switch): a few per second suffice.
    period = max(spec.config.scheduling.stats_period_ms / 1000.0, STATS_TO_PARENT_S)
    ended = _EndSignal(handle.sched.finished)
    try:
        _control_loop(conn, handle, ended, period)
    finally:
        ended.close()
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


def adopt_environment(environ: dict[str, str]) -> None:
    """Make ``os.environ`` equal ``environ`` (before the spec's unpickling imports user modules)."""
    for name in [n for n in os.environ if n not in environ]:
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _wait_for_rings(conn: Any) -> list[tuple] | None:
    """Block until the parent says the rings exist; return what else it sent first (None: it is gone).

    The parent sends "rings" right after creating them, or dies (then the pipe ends); a
    "shutdown" sent meanwhile is returned for the caller to obey.
    """
    early = []
    try:
        while True:
            message = receive(conn)
            if message[0] == "rings":
                return early
            early.append(message)
            if message[0] == "shutdown":
                return early
    except (EOFError, OSError):
        return None


class _EndSignal:
    """A file descriptor that becomes readable once the flow has finished.

    The control loop waits on it together with the parent's pipe, so it sleeps
    until a message, the end or the next stats report instead of waking every
    few milliseconds: each wake-up takes the GIL from the computing worker. A
    small thread waits on the scheduler's ``finished`` event and writes one byte.
    """

    def __init__(self, finished: threading.Event):
        self.fd, self._write_end = os.pipe()
        self._finished = finished
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="elastream-child-end", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._finished.wait(END_CHECK_S):
            if self._closed.is_set():
                return
        os.write(self._write_end, b"x")

    def close(self) -> None:
        self._closed.set()
        self._thread.join(END_CHECK_S + 1.0)
        for fd in (self.fd, self._write_end):
            try:
                os.close(fd)
            except OSError:
                pass


def _control_loop(conn: Any, handle: Any, ended: _EndSignal, period: float) -> None:
    """Obey the parent and send stats every ``period`` until the flow ends (or the parent is gone)."""
    next_stats = perf_counter() + period
    while not handle.done:
        try:
            ready = wait_ready([conn, ended.fd], timeout=max(0.0, next_stats - perf_counter()))
            if conn in ready:
                while conn.poll():
                    _obey(handle, receive(conn))
            if perf_counter() >= next_stats and not handle.done:
                send(conn, ("stats", handle.stats()))
                next_stats = perf_counter() + period
        except (EOFError, OSError):
            handle.sched.request_shutdown()  # the parent is gone: stop, nobody will read results
            return


def _obey(handle: Any, message: tuple) -> None:
    kind = message[0]
    if kind == "shutdown":
        handle.sched.request_shutdown()
    elif kind == "threads":
        handle.set_threads(int(message[1]))


_set_up_fork_server()
warm_up()
