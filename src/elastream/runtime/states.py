"""Operator scheduling states (C-Stream §3.2)."""

from __future__ import annotations

import enum


class OperatorState(enum.Enum):
    """Where an operator is in its scheduling life cycle.

    READY → RUNNING → {READY, READ_BLOCKED, WRITE_BLOCKED, SLEEPING, COMPLETED};
    blocked and sleeping operators return to READY; COMPLETED is final.
    """

    READY = "ready"
    RUNNING = "running"
    READ_BLOCKED = "read_blocked"
    WRITE_BLOCKED = "write_blocked"
    SLEEPING = "sleeping"
    COMPLETED = "completed"
