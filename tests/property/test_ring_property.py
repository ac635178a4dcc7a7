"""Property tests of the shared-memory ring: exactly-once, per-producer order, no torn record.

* Threads: 1-4 producer threads × the test thread as consumer, random record
  and batch sizes (up to the largest record, so wrap-around and full-ring
  waits happen), random ring sizes and read sizes.
* The sliding window, single-threaded and deterministic: random interleavings
  of "start a write" / "finish it" / "write a whole batch" / "read", where a
  started write stays WRITING (a producer mid-copy). After every read, each
  published record must have been delivered — the consumer never waits behind
  a record still being written — and each producer's records come in order.

Payloads carry producer id, sequence number, length and a CRC32 of the body
(see :func:`make_payload` / :func:`parse_payload`, shared with the process tests).
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import elastream.ipc.ring as ring_mod
from elastream.ipc import SharedRing
from ring_payloads import PAYLOAD_HEAD, make_payload, parse_payload

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("ring_path")]

BATCH_MAX = 3


def max_body(capacity: int) -> int:
    """The largest body such that a batch of BATCH_MAX payloads still fits in one record."""
    return (capacity // 2 - ring_mod.HEADER_BYTES) // BATCH_MAX - 4 - PAYLOAD_HEAD.size


def check_delivery(delivered: list[tuple[int, bytes]], sent_counts: dict[int, int]) -> None:
    """Every payload exactly once, intact, with target == producer, and per-producer in order."""
    per_producer: dict[int, list[int]] = defaultdict(list)
    for target, payload in delivered:
        producer, seq = parse_payload(payload)
        assert target == producer, f"payload {producer}/{seq} arrived with target {target}"
        per_producer[producer].append(seq)
    for producer, count in sent_counts.items():
        assert per_producer.get(producer, []) == list(range(count)), \
            f"producer {producer}: sequence {per_producer.get(producer, [])[:20]}... is not 0..{count - 1}"
    assert set(per_producer) <= set(sent_counts)


@st.composite
def thread_scenarios(draw):
    capacity = draw(st.sampled_from([4096, 5000, 8192, 32768]))
    body = st.one_of(st.integers(0, 48), st.integers(0, max_body(capacity)))
    producers = draw(st.lists(st.lists(st.lists(body, min_size=1, max_size=BATCH_MAX), max_size=40),
                              min_size=1, max_size=4))
    read_batch = draw(st.integers(1, 8))
    return capacity, producers, read_batch


@pytest.fixture
def fine_grained_switching():
    """Switch threads every microsecond so producers race inside reservations, not only between them."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenario=thread_scenarios())
def test_threads_deliver_every_record_once_in_producer_order(fine_grained_switching, scenario):
    capacity, producers, read_batch = scenario
    with SharedRing.create(capacity, producers=len(producers)) as ring:
        ids = [ring.register_producer() for _ in producers]
        errors: list[BaseException] = []

        def produce(producer: int, batches: list[list[int]]) -> None:
            try:
                seq = 0
                for sizes in batches:
                    batch = []
                    for n in sizes:
                        batch.append(make_payload(producer, seq, n))
                        seq += 1
                    ring.write_batch(batch, target=producer, producer=producer, timeout=30)
                ring.close_producer(producer)
            except BaseException as error:  # noqa: BLE001 - reported by the test thread
                errors.append(error)

        threads = [threading.Thread(target=produce, args=(pid, batches), name=f"ring-producer-{pid}")
                   for pid, batches in zip(ids, producers)]
        for t in threads:
            t.start()
        delivered: list[tuple[int, bytes]] = []
        try:
            while True:
                records = ring.read(read_batch, timeout=30)
                if not records:
                    break
                delivered.extend(records)
        finally:
            for t in threads:
                t.join(30)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        check_delivery(delivered, {pid: sum(map(len, batches)) for pid, batches in zip(ids, producers)})
        stats = ring.statistics()
        assert stats.sequence_errors == 0 and stats.failed_records_skipped == 0
        assert stats.records_read == stats.records_written == sum(map(len, producers))
        assert stats.occupancy == 0 and ring.at_eof
        event(f"wrapped: {stats.flush_wraps > 0}")
        event(f"ring full: {stats.full_events > 0}")


# -- the sliding window, deterministically -------------------------------------------------------------
START, FINISH, WRITE, READ = "start", "finish", "write", "read"


@st.composite
def window_scenarios(draw):
    capacity = draw(st.sampled_from([4096, 6000, 16384]))
    n_producers = draw(st.integers(1, 4))
    ops = draw(st.lists(st.tuples(st.sampled_from([START, FINISH, WRITE, READ]), st.integers(0, n_producers - 1),
                                  st.integers(0, max_body(capacity))), min_size=1, max_size=80))
    return capacity, n_producers, ops


def _begin(ring: SharedRing, producer: int, payload: bytes) -> int | None:
    parts, lengths = ring_mod._gather([payload])
    length = lengths[0] + 4
    slot = ring._slot(producer)
    reserved = ring._reserve(slot, ring_mod._record_size(length))
    if reserved is None:
        return None
    w, pad = reserved
    word = ring._fill(w, pad, slot, producer, ring_mod.KIND_BATCH, producer, length, parts, lengths)
    ring._q[slot + ring_mod._P_SEQ] += 1            # what a publishing write does afterwards
    return word


@settings(max_examples=150, deadline=None)
@given(window_scenarios())
def test_window_never_waits_behind_a_record_being_written(scenario):
    capacity, n_producers, ops = scenario
    with SharedRing.create(capacity) as ring:
        ids = [ring.register_producer() for _ in range(n_producers)]
        next_seq = dict.fromkeys(ids, 0)
        open_write: dict[int, int] = {}              # producer -> status word of its unpublished record
        published: set[tuple[int, int]] = set()
        delivered: list[tuple[int, bytes]] = []
        seen: set[tuple[int, int]] = set()
        pending_seq: dict[int, int] = {}

        def read_all() -> None:
            for target, payload in ring.try_read(1 << 20):
                key = parse_payload(payload)
                assert key in published, f"record {key} delivered before it was published"
                assert key not in seen, f"record {key} delivered twice"
                seen.add(key)
                delivered.append((target, payload))
            # never waits: every published record has been delivered after a full read
            assert published == seen, f"published but not delivered: {sorted(published - seen)[:5]}"

        for op, producer, n in ops:
            if op == START and producer not in open_write:
                seq = next_seq[producer]
                word = _begin(ring, producer, make_payload(producer, seq, n))
                if word is not None:
                    open_write[producer] = word
                    pending_seq[producer] = seq
                    next_seq[producer] += 1
            elif op == FINISH and producer in open_write:
                assert ring._atomic.cas(open_write.pop(producer) * 8, ring_mod.WRITING, ring_mod.READY)
                published.add((producer, pending_seq.pop(producer)))
            elif op == WRITE and producer not in open_write:
                seq = next_seq[producer]
                if ring.try_write_batch([make_payload(producer, seq, n)], target=producer, producer=producer):
                    published.add((producer, seq))
                    next_seq[producer] += 1
            elif op == READ:
                read_all()
        for producer, word in list(open_write.items()):
            assert ring._atomic.cas(word * 8, ring_mod.WRITING, ring_mod.READY)
            published.add((producer, pending_seq.pop(producer)))
        read_all()
        check_delivery(delivered, next_seq)
        stats = ring.statistics()
        assert stats.sequence_errors == 0 and stats.occupancy == 0
