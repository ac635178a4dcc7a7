"""The parent's record of one worker process: its spec, process, pipe and what it last reported.

Threading: ``send`` may be called from any thread (one lock per pipe); the other fields are written by
the supervisor thread and read by the callers of the run handle.
"""

from __future__ import annotations

import threading
from typing import Any

from elastream.metrics.stats import FlowStats
from elastream.processes.messages import Control, Final, RingsReady, Shutdown, send
from elastream.processes.spec import ChildSpec, SpecPart


class ChildRecord(SpecPart):
    """The parent's record of one worker process."""

    def __init__(self, spec: ChildSpec, process: Any, conn: Any):
        self.spec = spec
        self.process = process
        self.conn = conn
        self.stats: FlowStats | None = None
        self.final: Final | None = None
        self.pid: int | None = None
        self._send_lock = threading.Lock()

    def send(self, message: RingsReady | Shutdown | Control) -> bool:
        """Send ``message`` unless the worker's end is gone (its sentinel tells the supervisor why)."""
        try:
            with self._send_lock:
                send(self.conn, message)
            return True
        except (OSError, ValueError):
            return False

    def join(self, timeout: float) -> None:
        """Join the process; terminate, then kill it if it has not ended by then."""
        self.process.join(timeout)
        for stop in (self.process.terminate, self.process.kill):
            if self.process.exitcode is not None:
                break
            stop()
            self.process.join(1.0)


def any_unended(children: Any) -> bool:
    """True while one of ``children`` has not reported its end (its sentinel still matters)."""
    return any(c.final is None for c in children)
