"""Self-checking ring payloads shared by the ring property and process tests.

A payload carries its producer, sequence number, body length and a CRC of the
body, so a consumer can prove exactly-once, per-producer order and no torn record.
"""

from __future__ import annotations

import random
import struct
import zlib

PAYLOAD_HEAD = struct.Struct("<HIII")     # producer, seq, body length, crc32(body)


def make_payload(producer: int, seq: int, n: int) -> bytes:
    """A payload of ``n`` deterministic body bytes for (producer, seq)."""
    body = random.Random(producer << 32 | seq).randbytes(n)
    return PAYLOAD_HEAD.pack(producer, seq, n, zlib.crc32(body)) + body


def parse_payload(payload: bytes) -> tuple[int, int]:
    """``(producer, seq)`` of an intact payload; AssertionError if it is torn."""
    producer, seq, n, crc = PAYLOAD_HEAD.unpack_from(payload)
    body = payload[PAYLOAD_HEAD.size:]
    assert len(body) == n, f"payload {producer}/{seq}: body {len(body)} bytes, header says {n}"
    assert zlib.crc32(body) == crc, f"payload {producer}/{seq}: checksum mismatch (torn record)"
    return producer, seq
