"""The suspension protocol: the only ways an operator gives control back.

A coroutine operator suspends by awaiting :func:`suspend` with one of the small
messages below; the worker that resumed it receives the message from
``coro.send`` and hands it to the scheduler (trio's ``_traps`` idea). Function
operators return the same messages from ``Task.run``. Messages are immutable.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.buffer import PortBuffer


class WaitMode(enum.Enum):
    """Conjunctive (wait_for_all) or disjunctive (wait_for_any) wait, C-Stream §3.2.1."""

    CONJ = "conjunctive"
    DISJ = "disjunctive"


@dataclass(frozen=True, slots=True)
class ReadWait:
    """Block until the wait specification holds (Algorithm 4)."""

    spec: tuple[tuple[PortBuffer, int], ...]
    mode: WaitMode

    def cannot_block(self) -> bool:
        """Algorithm 4's early return: closed ports make the wait unsatisfiable.

        Stricter than the paper's "any port closed": a closed port that still holds
        enough tuples does not end the wait, or the operator would spin.
        """
        if self.mode is WaitMode.CONJ:
            return any(b.closed and b.count < c for b, c in self.spec)
        return all(b.closed and b.count < c for b, c in self.spec)


@dataclass(frozen=True, slots=True)
class WriteWait:
    """Block until one of these full downstream buffers has space (Algorithm 5)."""

    buffers: tuple[PortBuffer, ...]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Block until the perf_counter time ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class ExternalWait:
    """Block until ``probe()`` is true; something outside this process must make it so.

    Used for shared-memory rings: the operator is READ_BLOCKED (``write=False``)
    or WRITE_BLOCKED (``write=True``, back-pressure from another process) and the
    runtime's :class:`~elastream.runtime.poller.ExternalPoller` wakes it. An
    optional ``waiter`` lets the poller sleep on a file descriptor instead of
    re-checking on a timer (see :class:`~elastream.runtime.poller.Waiter`).
    """

    probe: Callable[[], bool]
    write: bool
    waiter: Any = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The operator raised; ``details`` is the formatted traceback."""

    error: BaseException
    details: str


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The quantum is used up, let the policy pick again (C-Stream §3.2.4).
PREEMPT = _Marker("PREEMPT")
#: The operator has finished its driver loop (Algorithm 6).
COMPLETED = _Marker("COMPLETED")
#: One of several workers on a shared task stops; the last one out decides the state (dynamic allotment).
LEAVE = _Marker("LEAVE")

Outcome = ReadWait | WriteWait | Sleep | ExternalWait | Failed | _Marker


@types.coroutine
def suspend(message: Any) -> Generator[Any, None, None]:
    """Suspend the calling operator coroutine, handing ``message`` to its worker."""
    yield message
