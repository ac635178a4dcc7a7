"""The one protocol every backend's running flow implements, and what a run returns.

``es.Runner(...).start(flow)`` returns a :class:`RunHandle` whatever the backend
(threads in this process, worker processes, Spark); ``wait`` returns the same
:class:`RunResult`. Elasticity and scheduling controllers talk to a running flow
only through ``submit(decisions)`` (:mod:`elastream.runtime.decisions`).

Threading: a handle's methods are called from the user's thread (``stats``,
``states`` and ``finished`` from any thread).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol, runtime_checkable

from elastream.metrics.stats import FlowStats
from elastream.runtime.decisions import Applied, Decision

#: How often a caller waiting for a run looks whether the run can still end (an engine fault); the
#: run's end wakes it at once. Rarely: each look takes the GIL from a computing worker.
WAIT_CHECK_S = 0.5


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a finished run returns."""

    outputs: dict[str, Any]
    """Sink results by operator name (e.g. the list a Collect gathered)."""
    stats: FlowStats
    elapsed_s: float
    shutdown: bool = False
    """True when the run was ended by an explicit shutdown."""
    timeline: Any = None
    """An elastic run's timeline (levels, throughput and decisions per period); None otherwise."""


@runtime_checkable
class RunHandle(Protocol):
    """A flow running in the background, on any backend."""

    @property
    def finished(self) -> threading.Event:
        """Set once the run has ended (completed, failed or shut down)."""

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the flow ends; raise OperatorError if an operator failed."""

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        """Stop the flow early and wait for it; what the sinks accepted is kept."""

    def request_shutdown(self) -> None:
        """Ask the flow to stop, without waiting."""

    def stats(self) -> FlowStats:
        """A statistics snapshot (safe while running)."""

    def states(self) -> dict[str, str]:
        """Operator name → scheduling state."""

    def set_threads(self, n: int) -> int:
        """Change the worker threads of every process while the flow runs; returns the new count."""

    def submit(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Apply reconfiguration decisions at the run's reconfiguration point; returns how each went."""


def wait_slice(deadline: float | None, longest: float = WAIT_CHECK_S) -> float:
    """How long a waiting caller sleeps before its next look: ``longest``, or less when ``deadline`` comes first.

    Example: ``wait_slice(None)`` → 0.5; ``wait_slice(perf_counter() + 0.1)`` → about 0.1.
    """
    return longest if deadline is None else min(longest, max(0.0, deadline - perf_counter()))
