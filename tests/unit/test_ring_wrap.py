"""The wrap-around of the shared ring (TurboStream Fig. 5d) at every size of room left at the end of a lap.

A record never straddles the end of the data area: the producer that finds
the rest of the lap too short reserves it too and, when it holds at least a
header (``>= HEADER_BYTES``), writes a FLUSH record there; a shorter tail is
an implied flush (invariant 2 of :mod:`elastream.ipc.ring`). The boundary —
room for exactly one header — is where an off-by-one (``>`` for ``>=``) leaves
a tail without a header that the consumer takes for space still being
written and waits on, so these tests leave each size of room in turn,
deterministically, and read on at once. They run with the C hot path and with
the Python paths alone (the ``ring_path`` fixture): the C append declines a
record that must wrap and the C scan stops at a FLUSH record, so the flush is
always the Python path's, and the read crosses both.
"""

from __future__ import annotations

import pytest

import elastream.ipc.ring as ring_mod
from elastream.ipc import SharedRing
from elastream.ipc.ring import FLUSH, HEADER_BYTES

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("ring_path")]

CAPACITY = 4096
LENGTH_PREFIX = 4            # a batch record's payload: u32 length + bytes per item (Fig. 5c)
WRAPPED = b"w" * 100         # 136 bytes as a record: more than any room left below


def filler_payloads(total: int) -> list[bytes]:
    """Payloads of one-item batch records whose record sizes add up to exactly ``total`` bytes."""
    largest = CAPACITY // 2
    sizes = []
    while total:
        size = total if total <= largest else min(largest, total - 2 * HEADER_BYTES)
        sizes.append(size)
        total -= size
    return [bytes(size - HEADER_BYTES - LENGTH_PREFIX) for size in sizes]


def leave_room(ring: SharedRing, room: int, *, unread_last: bool) -> list[bytes]:
    """Write records until exactly ``room`` bytes are left in the first lap; read all (or all but the last)."""
    fillers = filler_payloads(CAPACITY - room)
    for i, payload in enumerate(fillers):
        assert ring.try_write_batch([payload], target=i)
        if not (unread_last and i == len(fillers) - 1):
            assert ring.try_read() == [(i, payload)]
    assert ring._q[ring_mod._W_WPOS] == CAPACITY - room
    return fillers


@pytest.fixture
def ring():
    with SharedRing.create(CAPACITY) as r:
        yield r


@pytest.mark.parametrize("room", [8, HEADER_BYTES - 8, HEADER_BYTES, HEADER_BYTES + 8, 2 * HEADER_BYTES],
                         ids=lambda room: f"room{room}")
@pytest.mark.parametrize("unread_last", [False, True], ids=["drained", "one_left"])
def test_a_record_that_does_not_fit_the_rest_of_the_lap_goes_to_the_next_one(ring, room, unread_last):
    assert ring.capacity == CAPACITY and ring_mod._record_size(LENGTH_PREFIX + len(WRAPPED)) > room
    ring.register_producer()
    fillers = leave_room(ring, room, unread_last=unread_last)
    assert ring.try_write_batch([WRAPPED], target=99)
    # the record starts the next lap, after the room it skipped
    assert ring._q[ring_mod._W_WPOS] == CAPACITY + ring_mod._record_size(LENGTH_PREFIX + len(WRAPPED))
    expected = ([(len(fillers) - 1, fillers[-1])] if unread_last else []) + [(99, WRAPPED)]
    assert ring.try_read() == expected                      # at once: nothing is taken for a record in flight
    stats = ring.statistics()
    assert stats.flush_wraps == 1 and stats.occupancy == 0
    assert stats.empty_recoveries == stats.failed_records_skipped == stats.sequence_errors == 0


@pytest.mark.parametrize("room", [HEADER_BYTES, HEADER_BYTES + 8, 2 * HEADER_BYTES], ids=lambda room: f"room{room}")
def test_room_for_a_header_gets_a_flush_record_covering_it(ring, room):
    """From exactly one header's room up, the rest of the lap holds a valid FLUSH header (Fig. 5d)."""
    ring.register_producer()
    leave_room(ring, room, unread_last=False)
    at = CAPACITY - room
    assert ring.try_write_batch([WRAPPED])
    header = ring._data + at
    status, length = ring._q[header >> 3], int.from_bytes(ring._buf[header + 8:header + 12], "little")
    assert (status, length) == (FLUSH, room - HEADER_BYTES)
    assert ring._q[(header >> 3) + 3] == at ^ ring._salt      # its tag: a header of this lap (invariant 3)
    assert ring.try_read() == [(0, WRAPPED)]


def test_an_exact_fit_at_the_end_of_the_lap_needs_no_flush(ring):
    ring.register_producer()
    leave_room(ring, ring_mod._record_size(LENGTH_PREFIX + len(WRAPPED)), unread_last=False)
    assert ring.try_write_batch([WRAPPED])
    assert ring._q[ring_mod._W_WPOS] == CAPACITY
    assert ring.try_read() == [(0, WRAPPED)]
    assert ring.statistics().flush_wraps == 0
