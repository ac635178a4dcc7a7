"""Part 0 of a multi-process run, executed by the parent process itself.

Why: with ``Runner(processes=P)`` the parent would otherwise sit idle while P
children work, and part 0 usually holds the sources and the sinks. Running it
in the parent saves a process start, pickling the source data into a child
and pickling the sink results back — all of it on the run's critical path
(about 0.2 s for 200,000 small tuples on the 2-core machine) — and P
processes then really means P processes.

The part reports as a worker does, with the values of
:mod:`elastream.processes.messages`: its end is a ``Done`` or ``Failed``
(:attr:`LocalPart.final`), a decision is answered with a ``ControlResult``.

Threading: :class:`LocalPart` is created in the user's thread (it starts the
ordinary single-process engine on part 0's flow). An
:class:`~elastream.processes.end_signal.EndSignal` makes :attr:`LocalPart.ready_fd`
readable once the part has finished, so the supervisor thread waits for it
together with the child pipes and sentinels instead of polling (every wake-up
would take the GIL from part 0's worker). The supervisor then calls
:meth:`LocalPart.collect` once, or :meth:`LocalPart.request_shutdown` when
another part fails; :meth:`control` is called from the user's thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from elastream.metrics.stats import FlowStats
from elastream.processes.control import apply_in_part
from elastream.processes.end_signal import EndSignal
from elastream.processes.fused_members import replicated_chains, with_members
from elastream.processes.messages import ControlResult, Done, Failed, Final
from elastream.processes.spec import ChildSpec, SpecPart, build_child_flow
from elastream.runtime.decisions import Decision


class LocalPart(SpecPart):
    """One part of a split flow run by the engine in this process (same role as a child process)."""

    def __init__(self, spec: ChildSpec):
        from elastream.runtime.engine import start_threads

        self.spec = spec
        self.pid = os.getpid()
        self.final: Final | None = None
        """How the part ended, once collected."""
        self.handle: Any = None
        #: The replicas of fused chains the part runs: its statistics list their members too.
        self.chains = replicated_chains(spec.operators)
        if not spec.operators:
            self.final = Done()  # a placement may leave part 0 empty
            self._ended = EndSignal.already_set()
            return
        self.handle = start_threads(build_child_flow(spec), spec.config)
        self._ended = EndSignal(self.handle.finished, name="elastream-local-watch")

    @property
    def ready_fd(self) -> int:
        """A file descriptor that becomes readable once the part has finished."""
        return self._ended.fd

    @property
    def done(self) -> bool:
        """True once every operator of the part has completed (or it was never started)."""
        return self.handle is None or self.handle.done

    def collect(self, timeout: float) -> BaseException | None:
        """Join the part's threads and record its end; return its failure, if any."""
        if self.final is None:
            try:
                result = self.handle.wait(timeout)
            except BaseException as error:  # noqa: BLE001 - reported as the run's failure
                self.final = Failed.of(error, self._with_members(self.handle.stats()), "<process 0>", keep=True)
            else:
                self.final = Done(result.outputs, self._with_members(result.stats), result.shutdown)
            finally:
                self._ended.close()
        return self.final.error if isinstance(self.final, Failed) else None

    def close(self) -> None:
        """Release the ready pipe (after :meth:`collect`)."""
        self._ended.close()

    def when_completed(self, names: Iterable[str], callback: Callable[[], None]) -> None:
        """Call ``callback()`` as each operator of ``names`` completes (signals only: see ThreadRunHandle)."""
        if self.handle is not None:
            for name in names:
                self.handle.when_completed(name, callback)

    def request_shutdown(self) -> None:
        """Ask the part to stop (another part failed, or an explicit shutdown)."""
        if self.handle is not None and self.final is None:
            self.handle.request_shutdown()

    def stats(self) -> FlowStats | None:
        """The part's latest statistics (None before it started)."""
        if self.final is not None:
            return self.final.stats
        return self._with_members(self.handle.stats()) if self.handle is not None else None

    def _with_members(self, stats: FlowStats) -> FlowStats:
        return with_members(stats, self.handle, self.chains)

    def control(self, decision: Decision) -> ControlResult:
        """Apply ``decision`` to the running part now (the caller's thread is its control point)."""
        if self.handle is None or self.final is not None or self.handle.done:
            return ControlResult(0, False, "process 0 has ended")
        return apply_in_part(self.handle, decision)
