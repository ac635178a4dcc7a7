"""Which elastream ring segments exist in /dev/shm, and which this process created.

Shared by the autouse leak fixture in conftest.py and the ring tests. Other
sessions may be creating rings at the same time, so only segments whose header
names this process as creator count as ours.
"""

from __future__ import annotations

import os
import struct

SHM = "/dev/shm"


def ring_segments() -> set[str]:
    """Names of elastream ring segments in /dev/shm."""
    return {n for n in os.listdir(SHM) if n.startswith("esring_")} if os.path.isdir(SHM) else set()


def created_here(name: str) -> bool:
    """Was segment ``name`` created by this process? (Other sessions may be creating rings right now.)"""
    try:
        with open(os.path.join(SHM, name), "rb") as f:
            header = f.read(80)
    except OSError:
        return False
    return len(header) == 80 and struct.unpack_from("<Q", header, 64)[0] == os.getpid()
