"""Run test threads with a tiny GIL switch interval, so their steps interleave as much as possible."""

from __future__ import annotations

import sys
import threading


def run_racing(threads: list[threading.Thread], timeout: float = 20.0) -> None:
    """Start and join ``threads`` with ``sys.setswitchinterval(1e-5)``; the previous interval is restored."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    finally:
        sys.setswitchinterval(previous)
