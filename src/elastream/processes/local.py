"""Part 0 of a multi-process run, executed by the parent process itself.

Why: with ``Runner(processes=P)`` the parent would otherwise sit idle while P
children work, and part 0 usually holds the sources and the sinks. Running it
in the parent saves a process start, pickling the source data into a child
and pickling the sink results back — all of it on the run's critical path
(about 0.2 s for 200,000 small tuples on the 2-core machine) — and P
processes then really means P processes.

Threading: :class:`LocalPart` is created in the user's thread (it starts the
ordinary single-process engine on part 0's flow). A small watcher thread
waits for the part to finish and then makes :attr:`LocalPart.ready_fd`
readable, so the supervisor thread can wait for it together with the child
pipes and sentinels instead of polling (every wake-up would take the GIL from
part 0's worker). The supervisor then calls :meth:`LocalPart.collect` once, or
:meth:`LocalPart.request_shutdown` when another part fails; :meth:`collect`
joins the part's worker threads and the watcher.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from elastream.errors import OperatorError
from elastream.processes.spec import ChildSpec, build_child_flow


#: How often the watcher re-checks whether it was told to stop (it normally just waits for the end).
WATCH_CHECK_S = 0.5


class LocalPart:
    """One part of a split flow run by the engine in this process (same role as a child process)."""

    def __init__(self, spec: ChildSpec):
        from elastream.runtime.engine import start_threads

        self.spec = spec
        self.pid = os.getpid()
        self.final: tuple | None = None
        """("done", outputs, stats, shutdown) or ("failed", error, stats) once collected."""
        self.handle: Any = None
        self._read_end, self._write_end = os.pipe()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        if not spec.operators:
            self.final = ("done", {}, None, False)  # a placement may leave part 0 empty
            os.write(self._write_end, b"x")
            return
        try:
            self.handle = start_threads(build_child_flow(spec), spec.config)
        except BaseException:
            self.close()
            raise
        self._watcher = threading.Thread(target=self._watch, name="elastream-local-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        finished = self.handle.sched.finished
        while not finished.wait(WATCH_CHECK_S):
            if self._stop.is_set():
                return
        os.write(self._write_end, b"x")

    @property
    def ready_fd(self) -> int:
        """A file descriptor that becomes readable once the part has finished."""
        return self._read_end

    @property
    def index(self) -> int:
        """The part's process index."""
        return self.spec.index

    @property
    def operators(self) -> list[str]:
        """Names of the operators this part runs."""
        return [name for name, _ in self.spec.operators]

    @property
    def done(self) -> bool:
        """True once every operator of the part has completed (or it was never started)."""
        return self.handle is None or self.handle.done

    def collect(self, timeout: float) -> BaseException | None:
        """Join the part's threads and record its end; return its failure, if any."""
        try:
            result = self._wait(timeout)
        except OperatorError as error:
            self.final = ("failed", error, self.handle.stats())
            return error
        except BaseException as error:  # noqa: BLE001 - reported as the run's failure
            self.final = ("failed", error, self.handle.stats())
            return error
        self.final = ("done", result.outputs, result.stats, result.shutdown)
        return None

    def _wait(self, timeout: float) -> Any:
        try:
            return self.handle.wait(timeout)
        finally:
            self._stop.set()
            if self._watcher is not None:
                self._watcher.join(WATCH_CHECK_S + 1.0)

    def close(self) -> None:
        """Release the ready pipe (after :meth:`collect`)."""
        for fd in (self._read_end, self._write_end):
            try:
                os.close(fd)
            except OSError:
                pass

    def request_shutdown(self) -> None:
        """Ask the part to stop (another part failed, or an explicit shutdown)."""
        if self.handle is not None and self.final is None:
            self.handle.sched.request_shutdown()

    def stats(self) -> Any:
        """The part's latest statistics (None before it started)."""
        if self.final is not None:
            return self.final[2]
        return self.handle.stats() if self.handle is not None else None

    def set_threads(self, n: int) -> None:
        """Change the part's worker-thread count."""
        if self.handle is not None and self.final is None:
            self.handle.set_threads(n)
