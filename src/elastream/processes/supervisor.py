"""Parent side of a multi-process run: rings, worker processes, failure handling, merging.

Part 0 runs in the parent itself (:class:`~elastream.processes.local.LocalPart`),
parts 1..P-1 in child processes, so ``processes=P`` uses P processes and the
sources' data and the sinks' results of part 0 never cross a pipe.

Start (the fixed cost of every run, ~20 ms for two processes on the 2-vCPU
VM): the ring names are chosen first and the workers spawned, from a fork
server that has already imported and warmed up what a worker needs; while they
boot, this process creates the rings (pages allocated, not mapped: its handles
only unlink), tells each worker "rings", and starts part 0. Teardown: the rings
are unlinked as soon as every part has reported its end, while the workers exit.

Threading: the user's thread calls :class:`ProcessRunHandle` methods; one
supervisor thread owns the pipes and the process sentinels and polls the
local part. It records messages, notices a dead worker at once (its sentinel
fires), asks every other part to shut down, kills what has not ended after a
grace period, and always unlinks the shared-memory rings (normal end,
failure, Ctrl-C).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickletools
import sys
import threading
from dataclasses import replace
from multiprocessing.connection import wait as wait_ready
from time import perf_counter
from types import ModuleType
from typing import Any

import cloudpickle

from elastream.errors import ElastreamError, OperatorError
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.processes.child import FORKSERVER_SETUP_ENV, child_main, receive, send
from elastream.processes.local import LocalPart
from elastream.processes.replicate import expand_assignment
from elastream.processes.spec import ChildSpec, cross_edges, is_proxy, split_flow
from elastream.runtime.config import RunConfig
from elastream.runtime.decisions import Applied, Decision, SetThreads
from elastream.runtime.handle import RunResult, wait_slice


#: Longest sleep of the supervisor thread and of a waiting caller between looks (Ctrl-C interrupts the
#: caller's wait at once; a run that ends wakes both at once).
WATCH_S = 0.5

#: Modules the fork server imports before forking workers (``start_method="forkserver"``);
#: ``elastream.processes.child`` warms up the rest (see :func:`~elastream.processes.child.warm_up`).
#: The standard library's own part of a worker's start is in it too: running the main script again
#: (runpy, pkgutil) and unpickling the process object (popen_forkserver): ~1.5 ms a worker.
FORKSERVER_PRELOAD = ("elastream", "elastream.processes.child", "elastream.processes.spec",
                      "elastream.processes.proxies", "elastream.ordered.split_merge", "cloudpickle",
                      "runpy", "pkgutil", "multiprocessing.popen_forkserver")
#: A worker's spec larger than this is not scanned for modules to preload (the scan runs in Python).
PRELOAD_SCAN_BYTES = 1 << 20


class WorkerProcessError(ElastreamError):
    """A worker process died (killed, crashed) while the flow ran."""

    def __init__(self, index: int, pid: int | None, exitcode: int | None, operators: list[str]):
        how = f"killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
        super().__init__(f"worker process {index} (pid {pid}) died ({how}); its operators: {', '.join(operators)}")
        self.index = index
        self.pid = pid
        self.exitcode = exitcode
        self.operators = operators


class RemoteOperatorError(ElastreamError):
    """The original exception of an operator that failed in a worker process."""


class _Child:
    """The parent's record of one worker process."""

    def __init__(self, spec: ChildSpec, process: Any, conn: Any):
        self.spec = spec
        self.process = process
        self.conn = conn
        self.stats: FlowStats | None = None
        self.final: tuple | None = None
        self.pid: int | None = None

    @property
    def operators(self) -> list[str]:
        return [name for name, _ in self.spec.operators]


class ProcessRunHandle:
    """A flow running on several worker processes (same interface as RunHandle).

    ``flow`` must already be validated (``Runner.start`` does it before placing).
    """

    def __init__(self, flow: Flow, config: RunConfig, assignment: dict[str, int]):
        from elastream.ipc.ring import SharedRing

        self.flow = flow
        self.config = config
        self.timeline: list[Applied] = []
        # Replicated operators (``replicas=``, C-Stream §4.2) become split → replicas → merge.
        placement = config.placement
        self.run_flow, self.assignment = expand_assignment(
            flow, assignment, config.processes, config.replicas,
            stats=placement if isinstance(placement, FlowStats) else None,
            window_s=config.ordering.replica_window_s)
        self.processes = config.processes
        self._started = perf_counter()
        self._rings: list[Any] = []
        self._done = threading.Event()
        self._shutdown_sent = False
        self._stop_requested_at: float | None = None
        self._explicit_shutdown = False
        self._failure: BaseException | None = None
        self._result: Any = None
        self._children: list[_Child] = []
        self._local: LocalPart | None = None
        ring_names = {edge: SharedRing.new_name() for edge, *_ in cross_edges(self.run_flow, self.assignment)}
        try:
            specs = split_flow(self.run_flow, self.assignment, self.processes, ring_names, config.for_part())
            self._proxy_targets = {ce.sender_name: ce.conn.dst for spec in specs for ce in spec.outgoing}
            # The workers boot (~10 ms) while this thread creates the rings and starts part 0; each
            # waits for "rings" before it attaches any.
            self._children = self._spawn(specs[1:])
            for name in ring_names.values():
                # This handle only unlinks: the parts' own handles map and prefault the pages they use.
                self._rings.append(SharedRing.create(config.process.ring_bytes, name=name, producers=1, prefault=False))
            for c in self._children:
                _send_quietly(c.conn, ("rings",))  # one that has ended already (no operators) is reaped as usual
            self._local = LocalPart(specs[0])
        except BaseException:
            self._kill_children()
            self._unlink_rings()
            raise
        self._thread = threading.Thread(target=self._supervise, name="elastream-supervisor", daemon=True)
        self._thread.start()

    # -- start ---------------------------------------------------------------------------
    def _spawn(self, specs: list[ChildSpec]) -> list[_Child]:
        ctx = mp.get_context(self.config.process.start_method)
        payloads = [cloudpickle.dumps(spec) for spec in specs]
        if self.config.process.start_method == "forkserver" and not _fork_server_running():
            # The fork server imports the engine once; every later worker forks from it warm
            # (~10 ms instead of a fresh interpreter's ~0.3 s of imports). It is told only when it
            # starts, so what this flow's workers import is added then: a later run of the same
            # code forks with it already imported (no .pyc is written on the VM: each import compiles).
            wanted = worker_modules(payloads)
            _start_fork_server(ctx, list(dict.fromkeys(FORKSERVER_PRELOAD + tuple(preloadable_modules(wanted)))),
                               precompilable_sources(wanted))
        # A spawned worker inherits this process's environment; a forked one the fork server's.
        environ = dict(os.environ) if self.config.process.start_method == "forkserver" else None
        children = []
        try:
            for spec, payload in zip(specs, payloads):
                parent_end, child_end = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=child_main, args=(spec.index, payload, child_end, environ),
                                   name=f"elastream-proc-{spec.index}", daemon=True)
                proc.start()
                child_end.close()
                children.append(_Child(spec, proc, parent_end))
        except BaseException:
            self._children = children
            raise
        return children

    def _kill_children(self) -> None:
        for c in self._children:
            c.process.kill()
            c.process.join(1.0)

    # -- supervisor thread -------------------------------------------------------------------
    def _supervise(self) -> None:
        try:
            self._watch()
        finally:
            self._reap()
            self._unlink_rings()
            self._done.set()

    def _watch(self) -> None:
        live = {c.conn: c for c in self._children}
        sentinels = {c.process.sentinel: c for c in self._children}
        grace = self.config.scheduling.shutdown_grace_s + 2.0
        local = self._local
        while live or (local is not None and local.final is None):
            local_running = local is not None and local.final is None
            waitables = list(live) + list(sentinels) + ([local.ready_fd] if local_running else [])
            # Children and the local part wake this thread when they have news; the timeout only bounds how
            # late the grace period after a stop request is checked (every wake-up takes the GIL from part 0).
            for ready in wait_ready(waitables, timeout=WATCH_S if self._stop_requested_at is None else 0.1):
                child = live.get(ready)
                if child is not None:
                    self._drain(child, live)
                    continue
                child = sentinels.pop(ready, None)
                if child is not None:
                    self._drain(child, live)
                    live.pop(child.conn, None)
                    if child.final is None:
                        self._fail(WorkerProcessError(child.spec.index, child.pid or child.process.pid,
                                                      child.process.exitcode, child.operators))
            if local_running and local.done:
                failure = local.collect(timeout=grace)
                if failure is not None:
                    self._fail(failure)
            if self._rings and self._all_final():
                self._unlink_rings()  # nobody attaches any more: unlink while the workers exit (~1 ms a ring)
            asked = self._stop_requested_at
            if asked is not None and perf_counter() - asked > grace:
                break  # the survivors did not stop in time: _reap kills them

    def _all_final(self) -> bool:
        """True once every part has reported its end (done or failed)."""
        local = self._local
        return (local is None or local.final is not None) and all(c.final is not None for c in self._children)

    def _drain(self, child: _Child, live: dict) -> None:
        try:
            while child.conn.poll():
                self._handle(child, receive(child.conn))
        except (EOFError, OSError):
            live.pop(child.conn, None)

    def _handle(self, child: _Child, message: tuple) -> None:
        kind = message[0]
        if kind == "started":
            child.pid = message[1]
        elif kind == "stats":
            child.stats = message[1]
        elif kind == "done":
            child.final = message
            child.stats = message[2]
        elif kind == "failed":
            child.final = message
            _, operator, etype, text, details, stats = message
            if stats is not None:
                child.stats = stats
            cause = RemoteOperatorError(f"{etype}: {text}")
            error = OperatorError(operator, cause, details)
            error.__cause__ = cause
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._broadcast_shutdown()

    def _broadcast_shutdown(self) -> None:
        if self._shutdown_sent:
            return
        self._shutdown_sent = True
        self._stop_requested_at = perf_counter()
        if self._local is not None:
            self._local.request_shutdown()
        for c in self._children:
            if c.final is None:
                _send_quietly(c.conn, ("shutdown",))

    def _reap(self) -> None:
        local = self._local
        if local is not None and local.final is None:
            local.request_shutdown()  # only after the grace period: its threads get one more chance to end
            local.collect(timeout=self.config.scheduling.shutdown_grace_s + 2.0)
        if local is not None:
            local.close()
        for c in self._children:
            c.process.join(0.5 if c.final is not None else 0.0)
        for c in self._children:
            if c.process.is_alive():
                c.process.terminate()
        for c in self._children:
            c.process.join(1.0)
            if c.process.is_alive():
                c.process.kill()
                c.process.join(1.0)
            c.conn.close()

    def _unlink_rings(self) -> None:
        for ring in self._rings:
            try:
                ring.close()
            finally:
                ring.unlink()
        self._rings = []

    # -- control -----------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Ask every worker process to stop, without waiting."""
        self._explicit_shutdown = True
        self._broadcast_shutdown()

    def shutdown(self, timeout: float = 5.0) -> Any:
        """Ask every worker process to stop and wait for them."""
        self.request_shutdown()
        return self.wait(timeout)

    @property
    def finished(self) -> threading.Event:
        """Set once every worker process has ended."""
        return self._done

    def submit(self, decisions: list[Decision]) -> list[Applied]:
        """Apply ``decisions``: thread counts go to the named process (0: this one) over its control pipe."""
        applied = [self._apply(d) for d in decisions]
        self.timeline.extend(applied)
        return applied

    def _apply(self, decision: Decision) -> Applied:
        at = perf_counter() - self._started
        if isinstance(decision, SetThreads) and 0 <= decision.process < self.processes:
            if decision.process == 0 and self._local is not None:
                self._local.set_threads(decision.threads)
                return Applied(decision, at, True)
            child = next((c for c in self._children if c.spec.index == decision.process), None)
            if child is not None and child.final is None:
                send(child.conn, ("threads", decision.threads))
                return Applied(decision, at, True)
            return Applied(decision, at, False, f"process {decision.process} has ended")
        return Applied(decision, at, False, f"{type(decision).__name__} is not applied by the processes backend yet")

    def set_threads(self, n: int) -> int:
        """Set the worker-thread count of every worker process."""
        if self._local is not None:
            self._local.set_threads(n)
        for c in self._children:
            if c.final is None:
                send(c.conn, ("threads", n))
        return n

    @property
    def worker_pids(self) -> list[int | None]:
        """Process id of each worker process, by process index (index 0 is this process)."""
        local = [self._local.pid] if self._local is not None else []
        return local + [c.process.pid for c in self._children]

    @property
    def threads(self) -> int:
        """Worker threads per process."""
        return self.config.threads

    @property
    def done(self) -> bool:
        """True once every worker process has ended."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends; raise the first failure."""
        deadline = None if timeout is None else perf_counter() + timeout
        try:
            while not self._done.wait(wait_slice(deadline, WATCH_S)):
                if deadline is not None and perf_counter() >= deadline:
                    raise TimeoutError(f"flow {self.flow.name!r} still running after {timeout} s")
        except KeyboardInterrupt:
            self._explicit_shutdown = True
            self._broadcast_shutdown()
            self._done.wait(self.config.scheduling.shutdown_grace_s + 5.0)
            raise
        return self._finish()

    def _finish(self) -> Any:
        if self._failure is not None:
            raise self._failure
        if self._result is None:
            outputs: dict[str, Any] = {}
            for final in self._finals():
                if final is not None and final[0] == "done":
                    outputs.update({k: v for k, v in final[1].items() if not is_proxy(k)})
            self._result = RunResult(outputs=outputs, stats=self.stats(), elapsed_s=perf_counter() - self._started,
                                     shutdown=self._explicit_shutdown)
        return self._result

    # -- observation ---------------------------------------------------------------------------
    def stats(self) -> FlowStats:
        """Merged statistics of every worker process (proxies left out)."""
        local = [self._local.stats()] if self._local is not None else []
        return merge_stats(local + [c.stats for c in self._children], perf_counter() - self._started,
                           self.config.threads * self.processes, self.assignment, self._proxy_targets)

    def _finals(self) -> list[tuple | None]:
        local = [self._local.final] if self._local is not None else []
        return local + [c.final for c in self._children]

    def states(self) -> dict[str, str]:
        """Operator name → last reported state."""
        return {name: op.state for name, op in self.stats().operators.items()}


def _send_quietly(conn: Any, message: tuple) -> None:
    """Send ``message`` unless the worker's end is gone (its sentinel tells the supervisor why)."""
    try:
        send(conn, message)
    except (OSError, ValueError):
        pass


def _fork_server_running() -> bool:
    """True once this process's fork server runs (then a new preload list has no effect)."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None) is not None


def _start_fork_server(ctx: Any, preload: list[str], sources: list[str]) -> None:
    """Start the fork server with ``preload`` imported and ``sources`` compiled, on this process's ``sys.path``.

    Python 3.11's fork server drops the ``sys.path`` it is handed, so a module found only
    through an entry the main script added (a benchmark's own directory) would not import
    there; :mod:`elastream.processes.child` takes the path and the files to compile from
    :data:`FORKSERVER_SETUP_ENV`, set only while the server starts.
    """
    from multiprocessing import forkserver

    ctx.set_forkserver_preload(preload)
    os.environ[FORKSERVER_SETUP_ENV] = json.dumps({"sys_path": sys.path, "compile": sources})
    try:
        forkserver.ensure_running()
    finally:
        os.environ.pop(FORKSERVER_SETUP_ENV, None)


def worker_modules(payloads: list[bytes]) -> set[str]:
    """Modules a worker imports at its start, of those this process has imported.

    That is what the main script imports (a worker runs the parent's main script again, as
    ``__mp_main__``, before anything else; the fork server's own ``"__main__"`` preload never
    gets the script's path on Python 3.11) and what the pickles in ``payloads`` name
    (unpickling a worker's spec imports them): ~5-15 ms a worker when that is argparse or
    the flow's own module (no ``.pyc`` is written on the VM: each import compiles).
    """
    names = _main_script_modules()
    for payload in payloads:
        if len(payload) <= PRELOAD_SCAN_BYTES:
            names.update(_pickled_modules(payload))
    return {n for n in names if n in sys.modules and getattr(sys.modules[n], "__spec__", None) is not None}


def preloadable_modules(names: set[str]) -> list[str]:
    """Those of ``names`` the fork server may import for the workers: the standard library's and elastream's.

    A module imported once in the server is inherited by every worker, so one that seeds a
    random generator or opens a connection at import would hand all of them the same one,
    where each used to import its own; the others are only compiled there
    (:func:`precompilable_sources`). Only modules this process has imported are named: the
    fork server dies on an import that raises anything but ImportError.

    Example: ``preloadable_modules(worker_modules([cloudpickle.dumps(es.ops.Collect())])) == ["elastream.ops.sinks"]``
    """
    return sorted(n for n in names if _is_shared_safely(n))


def precompilable_sources(names: set[str]) -> list[str]:
    """Source files of the rest of ``names``: compiled in the fork server, executed by each worker itself."""
    sources = []
    for name in sorted(names):
        path = getattr(sys.modules[name], "__file__", None)
        if not _is_shared_safely(name) and isinstance(path, str) and path.endswith(".py"):
            sources.append(path)
    return sources


def _is_shared_safely(name: str) -> bool:
    """Modules whose import-time state every worker may inherit from the fork server: elastream's, the stdlib's."""
    top = name.split(".", 1)[0]
    return top == "elastream" or (top in sys.stdlib_module_names and not top.startswith("_") and top != "builtins")


def _main_script_modules() -> set[str]:
    """Modules the main script's names refer to: modules it imported, and where its imported objects live."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None:
        return set()  # python -c, -m, an interactive session: workers do not re-run a script
    names = set()
    for value in list(vars(main).values()):
        try:
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        except Exception:  # noqa: BLE001 - an object with an odd __getattr__: no hint from it
            continue
        if isinstance(name, str):
            names.add(name)
    return names


def _pickled_modules(payload: bytes) -> set[str]:
    """Module names of the globals a pickle refers to (GLOBAL, and STACK_GLOBAL after two strings)."""
    names: set[str] = set()
    memo: dict[int, Any] = {}
    last: list[Any] = [None, None]  # the two latest values pushed (strings matter)
    try:
        for op, arg, _ in pickletools.genops(payload):
            code = op.name
            if code == "GLOBAL":
                names.add(str(arg).split(" ", 1)[0])
            elif code == "STACK_GLOBAL":
                if isinstance(last[0], str):
                    names.add(last[0])
            elif code == "MEMOIZE":
                memo[len(memo)] = last[1]
                continue
            elif code in ("FRAME", "PROTO"):
                continue
            elif code in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = last[1]
                continue
            value = (memo.get(int(arg)) if code in ("BINGET", "LONG_BINGET", "GET")
                     else arg if isinstance(arg, str) and "UNICODE" in code else None)
            last = [last[1], value]
    except Exception:  # noqa: BLE001 - only a hint for the fork server
        pass
    return names


def merge_stats(parts: list[FlowStats | None], elapsed_s: float, threads: int,
                assignment: dict[str, int], proxy_targets: dict[str, str]) -> FlowStats:
    """One FlowStats from the per-process ones.

    Traffic sent to a ring proxy is credited to the real operator behind the
    ring (``proxy_targets``: sender proxy name → destination operator).
    """
    operators: dict[str, OperatorStats] = {}
    workers = []
    policy = "?"
    for i, part in enumerate(parts):
        if part is None:
            continue
        policy = part.policy
        for name, op in part.operators.items():
            if is_proxy(name):
                continue
            sent = {proxy_targets.get(dst, dst): n for dst, n in op.sent.items()}
            operators[name] = replace(op, sent=sent)
        for w in part.workers:
            workers.append(replace(w, index=len(workers)))
    ordered = {name: operators[name] for name in assignment if name in operators}
    return FlowStats(elapsed_s=elapsed_s, threads=threads, policy=policy, operators=ordered,
                     workers=tuple(workers))
