"""The consumer's per-producer sequence check (invariant 5 of :mod:`elastream.ipc.ring`) sees forged records.

Every record carries its producer's sequence number, and the consumer counts
each record whose number is not the one it expects next from that producer
(``statistics().sequence_errors``). Well-behaved rings only ever show 0, so
these tests forge an out-of-order record — they move a producer's next
sequence number in its slot before it writes — and check that the consumer
counts exactly that record, on every path that delivers records: the scan
(``_ringfast.read_ready`` or the Python loop), the polling window
(``_ringfast.poll_read`` or the Python loop) and the window's left side
(Python only). Each test runs with the C hot path and with the Python paths
alone (the ``ring_path`` fixture); without the check they fail.
"""

from __future__ import annotations

import time

import pytest

import elastream.ipc.ring as ring_mod
from elastream.ipc import SharedRing
from elastream.ipc.ring import READY, WRITING

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("ring_path")]

#: forged shifts of a producer's next sequence number: a record skipped, one repeated, one from far back
SHIFTS = {"skipped": 1, "repeated": -1, "far_back": -2}


@pytest.fixture
def ring():
    with SharedRing.create(4096) as r:
        yield r


def forge_next_sequence(ring: SharedRing, producer: int, shift: int) -> None:
    """Move ``producer``'s next sequence number by ``shift``: its next record comes out of order."""
    word = ring._slot(producer) + ring_mod._P_SEQ
    ring._q[word] = (ring._q[word] + shift) % (1 << 64)


def sequence_errors(ring: SharedRing) -> int:
    return ring.statistics().sequence_errors


def payloads(records) -> list[bytes]:
    return [bytes(p) for _, p in records]


def read_by_window(ring: SharedRing) -> list:
    """One polling window of a waiting reader (as ``_wait_data`` runs it): ``poll_read`` on the C path."""
    now = time.monotonic()
    return ring._hybrid_poll((now, now + 5.0), None, lambda: ring._try_read(8, False), (8, False))


@pytest.mark.parametrize("shift", SHIFTS.values(), ids=SHIFTS.keys())
@pytest.mark.parametrize("read", [SharedRing.try_read, read_by_window], ids=["scan", "window"])
def test_an_out_of_order_record_is_counted_once(ring, shift, read):
    me = ring.register_producer()
    for i in range(3):
        assert ring.try_write_batch([b"in order %d" % i], producer=me)
    assert len(read(ring)) == 3
    assert sequence_errors(ring) == 0
    forge_next_sequence(ring, me, shift)
    assert ring.try_write_batch([b"forged"], producer=me)
    assert ring.try_write_batch([b"after"], producer=me)   # in order again, counted from the forged one
    assert payloads(read(ring)) == [b"forged", b"after"]   # delivered all the same: the check only counts
    assert sequence_errors(ring) == 1


def test_out_of_order_records_of_one_producer_do_not_count_against_another(ring):
    a, b = ring.register_producer(), ring.register_producer()
    for producer in (a, b, a, b):
        assert ring.try_write_batch([b"x"], producer=producer)
    forge_next_sequence(ring, a, 5)
    for producer in (b, a, b):
        assert ring.try_write_batch([b"y"], producer=producer)
    assert len(ring.try_read()) == 7
    assert sequence_errors(ring) == 1


def test_a_forged_record_passed_by_the_window_is_counted_when_it_comes_back(ring):
    """The window's left side (a record delivered after others passed it) checks the sequence too."""
    a, b = ring.register_producer(), ring.register_producer()
    assert ring.try_write_batch([b"A0"], producer=a)
    assert payloads(ring.try_read()) == [b"A0"]
    forge_next_sequence(ring, a, 2)
    parts, lengths = ring_mod._gather([b"A1"])
    slot = ring._slot(a)
    w, pad = ring._reserve(slot, ring_mod._record_size(lengths[0] + 4))
    word = ring._fill(w, pad, slot, a, ring_mod.KIND_BATCH, 0, lengths[0] + 4, parts, lengths)  # left WRITING
    assert ring.try_write_batch([b"B0"], producer=b)
    assert payloads(ring.try_read()) == [b"B0"]             # passes A1, which waits on the left side
    assert ring._pending and sequence_errors(ring) == 0
    assert ring._atomic.cas(word * 8, WRITING, READY)        # A1 published
    assert payloads(ring.try_read()) == [b"A1"]
    assert sequence_errors(ring) == 1
