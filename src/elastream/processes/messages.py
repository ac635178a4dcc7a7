"""Every message between the parent of a multi-process run and its parts, as frozen dataclasses.

A worker process and the parent talk over one duplex pipe; each message is one
cloudpickled instance of a class below (operators' outputs may need
cloudpickle). The local part (part 0, run by the parent itself) reports its end
with the same :class:`Done` / :class:`Failed` values, and answers
:class:`Control` with the same :class:`ControlResult`, without a pipe.

* part → parent: :class:`Started` once its engine runs, :class:`Stats` every
  reporting period (and right after a decision), :class:`ControlResult` for
  each :class:`Control`, then one :class:`Done` or :class:`Failed`;
* parent → part: :class:`RingsReady` once every ring exists (a worker
  attaches none before), :class:`Shutdown`, :class:`Control`.

Receivers dispatch on the type (a small handler per message type).

Threading: immutable values. :func:`send` on one connection must not run in two
threads at once (the parent serialises its sends per worker).

Example::

    send(conn, Control(SetThreads(2, process=1), ticket=7))
    reply = receive(other_end)   # ControlResult(ticket=7, ok=True, why="")
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Union

import cloudpickle

from elastream.errors import OperatorError
from elastream.metrics.stats import FlowStats
from elastream.runtime.decisions import Decision


@dataclass(frozen=True, slots=True)
class Started:
    """The part's engine runs (a worker sends it once, after the rings were attached)."""

    pid: int


@dataclass(frozen=True, slots=True)
class Stats:
    """A statistics snapshot of the part."""

    stats: FlowStats


@dataclass(frozen=True, slots=True)
class Done:
    """The part ended without failure: its sinks' results (by operator name) and its last statistics."""

    outputs: dict[str, Any] = field(default_factory=dict)
    stats: FlowStats | None = None
    shutdown: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The part ended because ``operator`` raised (or the part could not start: ``<process i>``).

    ``outputs`` is what the part's sinks had accepted when it stopped. ``error`` is the
    exception itself for the local part only: an exception does not always pickle, so a
    worker sends its type name, text and traceback instead.
    """

    operator: str
    error_type: str
    message: str
    details: str
    stats: FlowStats | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    @classmethod
    def of(cls, error: BaseException, stats: FlowStats | None, where: str, *, keep: bool = False) -> Failed:
        """The failure ``error`` describes: an OperatorError names its operator and partial outputs,
        anything else is the part's own failure (``where``). ``keep``: carry the exception itself.
        """
        if isinstance(error, OperatorError):
            cause = error.__cause__ if error.__cause__ is not None else error
            partial = error.partial
            return cls(error.operator, type(cause).__name__, str(cause), error.details, stats,
                       dict(partial.outputs) if partial is not None else {}, error if keep else None)
        details = "".join(traceback.format_exception(error))
        return cls(where, type(error).__name__, str(error), details, stats, error=error if keep else None)


@dataclass(frozen=True, slots=True)
class RingsReady:
    """Every ring of the run exists: the worker may attach its own and start."""


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop the part (an explicit shutdown, or another part failed)."""


@dataclass(frozen=True, slots=True)
class Control:
    """Apply ``decision`` at the part's control loop and answer with a :class:`ControlResult` of ``ticket``."""

    decision: Decision
    ticket: int


@dataclass(frozen=True, slots=True)
class ControlResult:
    """How the part applied the decision of :class:`Control` ``ticket``: ``ok``, else ``why`` not."""

    ticket: int
    ok: bool
    why: str = ""
    pause_ms: float | None = None
    """Time inside the part's reconfiguration point (what the streams waited; the round trip is not it)."""


#: What a part sends to the parent.
PartMessage = Union[Started, Stats, ControlResult, Done, Failed]
#: What the parent sends to a worker.
ParentMessage = Union[RingsReady, Shutdown, Control]
#: How a part ends.
Final = Union[Done, Failed]


def send(conn: Any, message: PartMessage | ParentMessage) -> None:
    """Send one message (cloudpickled: user objects in outputs may need it)."""
    conn.send_bytes(cloudpickle.dumps(message))


def receive(conn: Any) -> PartMessage | ParentMessage:
    """Receive one message sent with :func:`send`."""
    return cloudpickle.loads(conn.recv_bytes())
