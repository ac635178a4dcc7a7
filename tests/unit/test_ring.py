"""Unit tests of the shared-memory ring (TurboStream §IV, Fig. 5) and the pickle codec, in one process.

Window and failure cases drive the ring's internals directly (``begin_write``
reserves space and writes a record without publishing it — a producer caught
mid-copy), so they are deterministic; the multi-producer and multi-process
properties live in ``tests/property`` and ``tests/integration``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import struct
import textwrap
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import elastream.ipc._ring_producer as producer_mod
import elastream.ipc._ring_waiting as waiting_mod
import elastream.ipc.ring as ring_mod
from elastream.ipc import Codec, CodecError, PickleCodec, RingClosedError, RingStats, SharedRing
from elastream.ipc._sync import BackgroundPrefault
from elastream.ipc.ring import HEADER_BYTES, READY, WRITING
from ring_segments_check import ring_segments

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("ring_path")]


@pytest.fixture
def ring():
    with SharedRing.create(4096) as r:
        yield r


def begin_write(ring: SharedRing, producer: int, payload: bytes, target: int = 0) -> int:
    """Reserve and fill a batch record for ``producer`` but leave it WRITING; return its status word."""
    parts, lengths = ring_mod._gather([payload])
    length = sum(lengths) + 4
    slot = ring._slot(producer)
    reserved = ring._reserve(slot, ring_mod._record_size(length))
    assert reserved is not None, "ring unexpectedly full"
    w, pad = reserved
    return ring._fill(w, pad, slot, producer, ring_mod.KIND_BATCH, target, length, parts, lengths)


def publish(ring: SharedRing, word: int) -> bool:
    return ring._atomic.cas(word * 8, WRITING, READY)


def payloads(records):
    return [p for _, p in records]


# -- synchronising with another thread on what it does, never on time -----------------------------------
@contextlib.contextmanager
def once(condition, action, what: str, timeout: float = 10.0):
    """Run ``action()`` in a helper thread as soon as ``condition()`` holds; the test fails if it never does.

    The helper polls the condition (an observable state of the ring, not a
    delay), so the action happens at a known point of the other side's work.
    Yields a list that holds ``action()``'s result once it ran; the thread is
    joined on exit.
    """
    done: list = []
    gave_up: list = []

    def run() -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                gave_up.append(what)
                return
            time.sleep(0.001)
        done.append(action())

    helper = threading.Thread(target=run, name="test-once")
    helper.start()
    try:
        yield done
    finally:
        helper.join(timeout + 5)
    assert not helper.is_alive() and not gave_up, f"timed out waiting for {what}"


def announced_asleep(consumer: SharedRing):
    """A condition: ``consumer`` has announced itself as sleeping (on its wake pipe or the futex) since now."""
    consumer._q[ring_mod._W_DATA_WAITERS] = 0       # a stale announcement of an earlier wait does not count
    return lambda: consumer._q[ring_mod._W_DATA_WAITERS] != 0


def blocked_on_space(ring: SharedRing):
    """A condition: a producer has been refused a write since now (it waits for space next)."""
    refused = ring.statistics().full_events
    return lambda: ring.statistics().full_events > refused


# -- basics ------------------------------------------------------------------------------------------
def test_batch_round_trip_keeps_targets_and_order(ring):
    ring.register_producer()
    assert ring.try_write_batch([b"a", b"", bytearray(b"xyz")], target=7)
    assert ring.try_write(memoryview(b"single"), target=2)
    assert ring.try_read() == [(7, b"a"), (7, b""), (7, b"xyz"), (2, b"single")]
    assert ring.try_read() == []


def test_payload_parts_are_gathered_into_one_payload(ring):
    ring.register_producer()
    arr = np.arange(4, dtype=np.int32)
    assert ring.try_write_batch([[b"head:", arr], b"next"])
    assert payloads(ring.try_read()) == [b"head:" + arr.tobytes(), b"next"]


def test_bad_payloads_are_refused_before_any_space_is_reserved(ring):
    ring.register_producer()
    with pytest.raises(TypeError, match="bytes-like"):
        ring.try_write_batch([b"ok", 42])
    with pytest.raises(ValueError, match="at least one payload"):
        ring.try_write_batch([])
    with pytest.raises(ValueError, match="largest record"):
        ring.try_write_batch([bytes(ring.max_record_bytes)])
    with pytest.raises(ValueError, match="target"):
        ring.try_write_batch([b"x"], target=-1)
    assert ring.statistics().records_written == 0
    assert ring._q[ring_mod._W_WPOS] == 0


def test_full_ring_refuses_then_accepts_after_read(ring):
    """Fig. 5e: a producer that would overwrite unconsumed data does not write."""
    ring.register_producer()
    chunk = bytes(900)
    written = 0
    while ring.try_write_batch([chunk]):
        written += 1
    assert written == 4                       # 4 x (32 + 4 + 900 → 936) = 3744 of 4096 bytes
    assert not ring.wait_writable(timeout=0.01)
    assert ring.statistics().full_events >= 1
    assert len(ring.try_read(1)) == 1
    assert ring.wait_writable(timeout=0)
    assert ring.try_write_batch([chunk])
    assert len(ring.try_read(100)) == 4


def test_wrap_around_writes_a_flush_marker_and_keeps_data(ring):
    """Fig. 5d: a record that does not fit before the end goes to the start after a FLUSH record."""
    ring.register_producer()
    sent, got = [], []
    for i in range(200):
        payload = bytes([i % 251]) * (i * 37 % 1500)
        sent.append(payload)
        while not ring.try_write_batch([payload], target=i):
            got += ring.try_read(3)
    got += ring.try_read(1000)
    assert got == list(enumerate(sent))
    stats = ring.statistics()
    assert stats.flush_wraps > 0 and stats.full_events > 0
    assert stats.records_read == stats.records_written == 200
    assert stats.sequence_errors == 0 and stats.max_occupancy <= ring.capacity


def test_tail_shorter_than_a_header_is_an_implied_flush(ring):
    ring.register_producer()
    # fill to 8 bytes before the end: 4096 - 8 = 4088 = 32 + 4 + 4052
    first = bytes(4052 - 2048)
    assert ring.try_write_batch([first])
    assert ring.try_read() == [(0, first)]
    rest = bytes(4088 - ring_mod._record_size(4 + len(first)) - HEADER_BYTES - 4)
    assert ring.try_write_batch([rest])
    assert ring._q[ring_mod._W_WPOS] % ring.capacity == ring.capacity - 8
    assert ring.try_write_batch([b"wrapped"])
    assert payloads(ring.try_read()) == [rest, b"wrapped"]
    assert ring._q[ring_mod._W_WPOS] == ring.capacity + ring_mod._record_size(4 + 7)


# -- the sliding window (Fig. 5b) and per-producer order -------------------------------------------
def test_window_reads_past_a_record_being_written_then_comes_back(ring):
    a, b = ring.register_producer(), ring.register_producer()
    word = begin_write(ring, a, b"A1")
    ring.try_write_batch([b"B1"], producer=b)
    ring.try_write_batch([b"B2"], producer=b)
    assert payloads(ring.try_read()) == [b"B1", b"B2"]       # never waits behind A1
    assert ring.statistics().occupancy > 0                   # A1's space is not released yet
    assert ring.try_read() == []
    assert publish(ring, word)
    assert payloads(ring.try_read()) == [b"A1"]
    assert ring.statistics().occupancy == 0


def test_window_never_reorders_records_of_one_producer(ring):
    """Even if a producer's later record is READY, it waits for the producer's earlier one."""
    a, b = ring.register_producer(), ring.register_producer()
    word = begin_write(ring, a, b"A1")
    ring.try_write_batch([b"A2"], producer=a)                 # misuse: A2 READY while A1 is WRITING
    ring.try_write_batch([b"B1"], producer=b)
    assert payloads(ring.try_read()) == [b"B1"]
    assert ring.try_read() == []                              # A2 waits behind A1
    publish(ring, word)
    assert payloads(ring.try_read()) == [b"A1", b"A2"]


def test_max_records_bounds_one_read(ring):
    ring.register_producer()
    for i in range(10):
        ring.try_write_batch([bytes([i])])
    assert len(ring.try_read(3)) == 3
    assert len(ring.try_read(100)) == 7


def test_stalled_writer_is_skipped_after_the_stall_timeout_and_its_publish_fails(wait_until):
    with SharedRing.create(4096, stall_timeout=0.2) as ring:
        a, b = ring.register_producer(), ring.register_producer()
        word = begin_write(ring, a, b"stuck")
        ring.try_write_batch([b"B1"], producer=b)
        assert payloads(ring.read(timeout=5)) == [b"B1"]

        def skipped() -> bool:
            ring.wait_readable(0.5)
            ring.try_read()
            return ring.statistics().failed_records_skipped > 0

        wait_until(skipped, what="the stalled record to be skipped")
        assert not publish(ring, word)                         # the producer learns it was declared failed
        assert ring.statistics().occupancy == 0


def test_a_live_writer_is_not_skipped_before_its_stall_timeout(wait_until):
    """The window checks on a record's writer now and then; a live one keeps its record (no size limit)."""
    with SharedRing.create(4096, stall_timeout=60) as ring:
        a, b = ring.register_producer(), ring.register_producer()
        word = begin_write(ring, a, b"slow")
        ring.try_write_batch([b"B1"], producer=b)
        assert payloads(ring.try_read()) == [b"B1"]
        first_check = ring._pending[0].next_check

        def writer_checked() -> bool:
            ring.try_read()
            return not ring._pending or ring._pending[0].next_check > first_check

        wait_until(writer_checked, what="a liveness check of the writer")
        assert ring._pending and ring.statistics().failed_records_skipped == 0
        assert publish(ring, word)
        assert payloads(ring.try_read()) == [b"slow"]


def test_abandoned_write_is_skipped_and_the_next_write_works(ring, monkeypatch):
    me = ring.register_producer()
    ring.fast = False                     # the failure is injected into the Python fill

    class Boom:
        def pack_into(self, *args):
            raise KeyboardInterrupt

    monkeypatch.setattr(producer_mod, "_U32", Boom())
    with pytest.raises(KeyboardInterrupt):
        ring.try_write_batch([b"lost"])
    monkeypatch.undo()
    assert ring.try_write_batch([b"kept"], producer=me)
    assert payloads(ring.try_read()) == [b"kept"]
    stats = ring.statistics()
    assert stats.abandoned_records == 1 and stats.failed_records_skipped == 1 and stats.sequence_errors == 0


def test_reserved_space_without_header_of_a_dead_writer_is_skipped():
    with SharedRing.create(4096, stall_timeout=0.3) as ring:
        a, b = ring.register_producer(), ring.register_producer()
        assert ring._reserve(ring._slot(a), 64) is not None    # A "dies" before writing its header
        ring.try_write_batch([b"B1"], producer=b)
        assert ring.try_read() == []                           # cannot see past the header-less space ...
        assert payloads(ring.read(timeout=5)) == [b"B1"]       # ... until it stalls out
        assert ring.statistics().empty_recoveries == 1


# -- end of stream, producers, consumer ------------------------------------------------------------
def test_end_of_stream_after_every_producer_closed_and_drained(ring):
    a, b = ring.register_producer(), ring.register_producer()
    ring.try_write_batch([b"x"], producer=a)
    ring.close_producer(a)
    ring.close_producer(a)                                     # idempotent
    assert not ring.at_eof
    ring.close_producer(b)
    assert not ring.at_eof                                     # not drained
    assert ring.read(timeout=5) == [(0, b"x")]
    assert ring.at_eof and ring.read(timeout=5) == []
    with pytest.raises(RuntimeError, match="end of stream"):
        ring.register_producer()


def test_expected_producers_keep_the_stream_open_until_all_joined():
    with SharedRing.create(4096, producers=2) as ring:
        ring.close_producer(ring.register_producer())
        assert not ring.at_eof
        ring.close_producer(ring.register_producer())
        assert ring.at_eof


def test_default_producer_must_be_unambiguous(ring):
    ring.register_producer()
    ring.register_producer()
    with pytest.raises(ValueError, match="producer="):
        ring.try_write_batch([b"x"])
    with pytest.raises(ValueError, match="not registered"):
        ring.try_write_batch([b"x"], producer=5)


def test_one_consumer_per_ring_and_takeover_does_not_redeliver(ring):
    ring.register_producer()
    ring.try_write_batch([b"1"])
    ring.try_write_batch([b"2"])
    other = SharedRing.attach(ring.name)
    try:
        assert ring.try_read(1) == [(0, b"1")]
        with pytest.raises(RuntimeError, match="already has a consumer"):
            other.try_read()
        ring.release_consumer()
        assert other.try_read() == [(0, b"2")]
        with pytest.raises(RuntimeError, match="already has a consumer"):
            ring.try_read()
    finally:
        other.close()


def test_wait_readable_wakes_on_a_write_from_another_thread(ring):
    ring.register_producer()
    assert not ring.wait_readable(timeout=0.02)
    with once(announced_asleep(ring), lambda: ring.try_write_batch([b"late"]), "the consumer to sleep"):
        assert ring.wait_readable(timeout=5)
    assert ring.try_read() == [(0, b"late")]
    assert ring.statistics().read_wait_s > 0


def _read_after_a_wake_up(consumer: SharedRing, producer: SharedRing, asleep=None) -> None:
    """``producer`` writes once ``consumer`` sleeps in ``read`` (default: once it announced it); the read gets it."""
    asleep = asleep or announced_asleep(consumer)
    with once(asleep, lambda: producer.try_write_batch([b"ping"]), "the consumer to sleep"):
        assert consumer.read(timeout=5) == [(0, b"ping")]


def test_consumer_sleeps_on_its_wake_pipe_which_producers_open_by_path(ring):
    other = SharedRing.attach(ring.name)
    try:
        other.register_producer()
        assert ring.try_read() == []                          # claims the consumer role: pipe published
        assert ring._wake_pipe is not None
        _read_after_a_wake_up(ring, other)
        token, fd = other._wake_writer
        assert token == ring._token and fd >= 0              # opened /proc/<pid>/fd/<n> and checked the inode
        assert not ring._q[ring_mod._W_WAKE_BROKEN]
    finally:
        other.close()


def test_futex_is_used_when_a_producer_cannot_reach_the_pipe(ring, monkeypatch):
    ring.register_producer()
    ring.try_read()
    monkeypatch.setattr(waiting_mod, "open_wake_writer", lambda *args: None)
    _read_after_a_wake_up(ring, ring)
    assert ring._q[ring_mod._W_WAKE_BROKEN] == 1


def test_capped_back_off_without_futex_or_pipe(ring, monkeypatch):
    ring.register_producer()
    ring.try_read()
    ring._wake_pipe.close()
    ring._wake_pipe = None
    monkeypatch.setattr(waiting_mod._FUTEX, "available", False)
    mark = time.monotonic()                          # no channel to announce on: the consumer polls with sleeps
    _read_after_a_wake_up(ring, ring, asleep=lambda: ring._wait_t0 >= mark)
    while ring.try_write_batch([bytes(1000)]):
        pass
    with once(blocked_on_space(ring), lambda: ring.try_read(1), "the producer to be refused"):
        ring.write_batch([bytes(1000)], timeout=5)


def test_wake_writer_refuses_an_fd_that_is_not_the_published_pipe(tmp_path):
    from elastream.ipc._sync import WakePipe, open_wake_writer

    pipe = WakePipe()
    try:
        assert open_wake_writer(os.getpid(), pipe.r, pipe.inode + 1) is None
        with open(tmp_path / "f", "w") as f:
            assert open_wake_writer(os.getpid(), f.fileno(), os.fstat(f.fileno()).st_ino) is None
        fd = open_wake_writer(os.getpid(), pipe.r, pipe.inode)
        assert fd is not None
        os.close(fd)
    finally:
        pipe.close()


def test_a_wake_pipe_closed_under_a_sleeping_consumer_wakes_it_without_an_error():
    from elastream.ipc._sync import WakePipe

    pipe, woke = WakePipe(), []
    sleeper = threading.Thread(target=lambda: woke.append(pipe.wait(10.0)))
    sleeper.start()
    time.sleep(0.05)
    pipe.close()                 # as a ring closing in another thread does (a race once raised EBADF in the sleeper)
    sleeper.join(5)
    assert not sleeper.is_alive() and woke == [True]


def test_blocking_write_times_out_then_succeeds_after_a_read(ring):
    ring.register_producer()
    while ring.try_write_batch([bytes(1000)]):
        pass
    with pytest.raises(TimeoutError, match="full"):
        ring.write_batch([bytes(1000)], timeout=0.05)
    space_waiters = (lambda: ring._q[ring_mod._W_SPACE_WAITERS] > 0) if waiting_mod._FUTEX.available \
        else blocked_on_space(ring)
    with once(space_waiters, lambda: ring.try_read(1), "the producer to sleep on the read cursor"):
        ring.write_batch([bytes(1000)], timeout=5)
    assert ring.statistics().write_wait_s > 0
    ring.try_read(100)
    with pytest.raises(TimeoutError, match="nothing to read"):
        ring.read(timeout=0.02)


def test_a_forked_child_writing_for_the_handles_producer_writes_as_itself(ring):
    """The C append's cached configuration is per process: the child's first write binds the id to it."""
    import multiprocessing as mp

    me = ring.register_producer()
    ring.write_batch([b"parent"])
    child = mp.get_context("fork").Process(target=ring.write_batch, args=([b"child"],))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert payloads(ring.try_read()) == [b"parent", b"child"]
    assert ring.failed_producers() == (me,)                   # bound to the child, which has exited


def _resident_kb(segment_name: str) -> int:
    """Resident size of this process's mapping of /dev/shm/<segment_name> (from /proc/self/smaps)."""
    rss, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = line.rstrip().endswith("/dev/shm/" + segment_name)
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_create_and_attach_map_the_head_at_once_and_every_page_soon_after(wait_until):
    with SharedRing.create(1 << 20) as ring:
        size_kb = (ring._data + ring.capacity) // 1024
        head_kb = (ring._data + ring_mod.PREFAULT_HEAD) // 1024
        assert _resident_kb(ring.name) >= head_kb                # the first records: no page faults
        wait_until(lambda: _resident_kb(ring.name) >= size_kb, what="the rest mapped in the background")
        other = SharedRing.attach(ring.name)
        try:
            assert _resident_kb(ring.name) >= size_kb + head_kb
            wait_until(lambda: _resident_kb(ring.name) >= 2 * size_kb, what="both mappings of this process")
        finally:
            other.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc and /dev/shm")
def test_an_owner_that_only_unlinks_allocates_the_pages_without_mapping_them():
    with SharedRing.create(1 << 20, prefault=False) as ring:
        size = ring._data + ring.capacity
        assert os.stat(f"/dev/shm/{ring.name}").st_blocks * 512 >= size
        assert _resident_kb(ring.name) < size // 1024


@pytest.mark.skipif(not os.path.exists("/dev/shm"), reason="needs Linux /dev/shm")
def test_a_ring_created_unreserved_gets_its_pages_only_from_reserve_pages_and_only_its_owner_may_ask():
    with SharedRing.create(1 << 20, prefault=False, reserve=False) as ring:
        size = ring._data + ring.capacity
        assert os.stat(f"/dev/shm/{ring.name}").st_blocks * 512 < size // 2   # the control block at most
        other = SharedRing.attach(ring.name, prefault=False)
        try:
            with pytest.raises(RuntimeError, match="only the handle that created it"):
                other.reserve_pages()
        finally:
            other.close()
        ring.reserve_pages()
        assert os.stat(f"/dev/shm/{ring.name}").st_blocks * 512 >= size
        ring.register_producer()
        assert ring.try_write(b"still a ring", target=3)
        assert ring.try_read(4) == [(3, b"still a ring")]


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_a_handle_closed_at_once_stops_its_background_prefault_which_then_unmaps(wait_until, monkeypatch):
    handed_over = []
    cancel = BackgroundPrefault.cancel

    def spy(job, then=None):
        handed_over.append(then is not None)
        return cancel(job, then)

    monkeypatch.setattr(BackgroundPrefault, "cancel", spy)
    owner = SharedRing.create(16 << 20, prefault=False)
    for _ in range(3):
        SharedRing.attach(owner.name).close()
    assert handed_over == [True] * 3            # close does not wait for the prefault thread: it hands it the unmap
    name = owner.name
    owner.close()
    wait_until(lambda: not [t for t in threading.enumerate() if t.name == "elastream-prefault"],
               what="the prefault threads to end")
    assert not _mapped(name)


def _mapped(segment_name: str) -> bool:
    """Does this process still map the segment (unlinked ones show as "... (deleted)")?"""
    with open("/proc/self/maps") as maps:
        return any("/dev/shm/" + segment_name in line for line in maps)


# -- life cycle ------------------------------------------------------------------------------------
def test_attach_and_pickle_by_name():
    with SharedRing.create(8192) as owner:
        clone = pickle.loads(pickle.dumps(owner))
        try:
            assert not clone.is_owner and clone.name == owner.name and clone.capacity == 8192
            clone.register_producer()
            clone.try_write_batch([b"via clone"])
            assert owner.try_read() == [(0, b"via clone")]
            with pytest.raises(RuntimeError, match="only the handle"):
                clone.unlink()
        finally:
            clone.close()
            clone.close()
    assert owner.name not in ring_segments()
    with pytest.raises(FileNotFoundError):
        SharedRing.attach(owner.name)


def test_closed_handle_refuses_work_and_unlink_is_idempotent():
    ring = SharedRing.create(4096)
    ring.close()
    ring.unlink()
    with pytest.raises(RingClosedError):
        ring.try_read()
    with pytest.raises(RingClosedError):
        ring.register_producer()


def test_owner_unlinks_when_garbage_collected():
    ring = SharedRing.create(4096)
    name = ring.name
    del ring
    import gc

    gc.collect()
    assert name not in ring_segments()


def test_attach_refuses_a_segment_that_is_not_a_ring():
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=4096, name="esring_not_a_ring_test")
    try:
        with pytest.raises(ValueError, match="not an elastream ring"):
            SharedRing.attach(shm.name)
    finally:
        shm.close()
        shm.unlink()


def test_statistics_is_a_frozen_snapshot(ring):
    stats = ring.statistics()
    assert isinstance(stats, RingStats) and stats.capacity == 4096
    with pytest.raises(AttributeError):
        stats.records_read = 3  # type: ignore[misc]


def test_atomics_fast_path_is_in_use(ring):
    assert ring._atomic.fast, "raw atomics function pointers unavailable: the ring falls back to the slow API"


# -- codec -----------------------------------------------------------------------------------------
codec = PickleCodec()


def frame(parts) -> bytes:
    return b"".join(bytes(memoryview(p).cast("B")) if not isinstance(p, bytes) else p for p in parts)


@pytest.mark.parametrize("obj", [(1, "a", 2.5), None, {"k": [1, 2]}, b"raw bytes", bytearray(b"ba"), "text"])
def test_codec_round_trip(obj):
    assert codec.decode(frame(codec.encode(obj))) == obj
    assert type(codec.decode(frame(codec.encode(obj)))) is type(obj)


def test_codec_moves_numpy_and_arrow_data_out_of_band():
    arr = np.arange(10_000, dtype=np.float64)
    parts = codec.encode(("x", arr))
    assert len(parts) == 3 and np.shares_memory(np.frombuffer(parts[2], dtype=np.float64), arr)
    assert len(parts[1]) < 200                               # the pickle stream holds structure only
    tag, back = codec.decode(frame(parts))
    assert tag == "x" and np.array_equal(back, arr)
    table = pa.table({"a": list(range(1000))})
    parts = codec.encode(table)
    assert len(parts) > 2
    assert codec.decode(frame(parts)).equals(table)


def test_codec_batches_and_lambdas():
    batch = [(i, str(i)) for i in range(256)]
    assert codec.decode_batch(frame(codec.encode_batch(iter(batch)))) == batch
    square = codec.decode(frame(codec.encode(lambda x: x * x)))
    assert square(7) == 49
    with pytest.raises(CodecError, match="batch"):
        codec.decode(frame(codec.encode_batch(batch)))
    with pytest.raises(CodecError, match="not a batch"):
        codec.decode_batch(frame(codec.encode(1)))
    with pytest.raises(CodecError, match="magic"):
        codec.decode(b"\x00" * 16)
    with pytest.raises(TypeError, match="cannot encode"):
        codec.encode(threading.Lock())
    assert isinstance(codec, Codec)


def test_codec_payloads_travel_through_the_ring(ring):
    ring.register_producer()
    arr = np.arange(100, dtype=np.int64)
    assert ring.try_write_batch([codec.encode(("arr", arr)), codec.encode_batch([(1,), (2,)])])
    (_, one), (_, many) = ring.try_read()
    name, back = codec.decode(one)
    assert name == "arr" and np.array_equal(back, arr) and codec.decode_batch(many) == [(1,), (2,)]


# -- docstring examples ------------------------------------------------------------------------------
@pytest.mark.parametrize("obj", [SharedRing, PickleCodec, "elastream.ipc"], ids=str)
def test_docstring_examples_run(obj):
    import importlib

    doc = importlib.import_module(obj).__doc__ if isinstance(obj, str) else obj.__doc__
    blocks = [textwrap.dedent(b) for b in re.findall(r"Example::\n\n((?:[ \t]+\S.*\n|\n)+)", doc)]
    assert blocks
    for code in blocks:
        exec(compile(code, f"<example of {obj}>", "exec"), {"SharedRing": SharedRing, "PickleCodec": PickleCodec})


# -- zero-copy reads ---------------------------------------------------------------------------------
def test_views_read_without_copy_and_hold_their_space_until_released():
    with SharedRing.create(4096) as ring:
        me = ring.register_producer()
        big = bytes(range(256)) * 6                                # 1,536 B: two fit in the 4 KB ring
        assert ring.try_write_batch([big, b"tail"], target=9, producer=me)
        [(t1, v1), (t2, v2)] = ring.try_read_views()
        assert (t1, t2) == (9, 9) and isinstance(v1, memoryview) and v1 == big and v2 == b"tail"
        assert ring.try_write_batch([big], producer=me)
        assert not ring.try_write_batch([big], producer=me)        # the viewed record still holds its space
        ring.release_views()
        with pytest.raises(ValueError):
            bytes(v1)                                              # released: no reading of reused space
        assert ring.try_write_batch([big], producer=me)            # ... which producers may now reuse
        assert payloads(ring.try_read()) == [big, big]
        ring.close_producer(me)
        assert ring.read_views(timeout=1) == [] and ring.at_eof


def test_views_equal_copies_across_wrap_around():
    rng = np.random.default_rng(5)
    with SharedRing.create(8192) as ring:
        me = ring.register_producer()
        for i in range(300):
            batch = [rng.bytes(int(n)) for n in rng.integers(0, 900, size=int(rng.integers(1, 4)))]
            assert ring.try_write_batch(batch, target=i, producer=me)
            got = ring.read_views(timeout=1)
            assert [(t, bytes(v)) for t, v in got] == [(i, b) for b in batch]
        assert ring.statistics().sequence_errors == 0 and ring.statistics().flush_wraps > 0


def test_closing_with_views_out_releases_them():
    ring = SharedRing.create(4096)
    me = ring.register_producer()
    ring.try_write_batch([b"held"], producer=me)
    [(_, view)] = ring.try_read_views()
    ring.close()
    with pytest.raises(ValueError):
        view.tobytes()


def test_a_lone_stalled_record_is_still_skipped_by_a_waiting_reader():
    """Waits do not return for a lone record being written, yet still check on its writer now and then."""
    with SharedRing.create(4096, stall_timeout=0.2) as ring:
        a = ring.register_producer()
        begin_write(ring, a, b"stuck")
        with pytest.raises(TimeoutError):
            ring.read(timeout=1.0)
        stats = ring.statistics()
        assert stats.failed_records_skipped == 1 and stats.occupancy == 0


# -- the hybrid polling window -----------------------------------------------------------------------
def _poll_window(ring: SharedRing, seconds: float, read: tuple[int, bool] = (8, False),
                 polling: threading.Event | None = None):
    """One polling window of a waiting reader (no nap: the window starts now), as ``_wait_data`` runs it.

    ``polling`` is set when the Python loop first looks (see :func:`is_polling`).
    """
    max_records, views = read
    now = time.monotonic()

    def attempt() -> list:
        if polling is not None:
            polling.set()
        return ring._try_read(max_records, views)

    return ring._hybrid_poll((now, now + seconds), None, attempt, read)


def is_polling(ring: SharedRing, polling: threading.Event):
    """A condition: a window is polling — the C poll holds the consumer lock, or the Python loop has looked."""
    return lambda: polling.is_set() or ring._consumer_lock.locked()


@pytest.mark.parametrize("views", [False, True], ids=["copies", "views"])
def test_a_record_published_during_the_window_comes_out_of_it(ring, views):
    ring.register_producer()
    assert ring.try_read() == []                              # claims the consumer role
    polling = threading.Event()
    with once(is_polling(ring, polling), lambda: ring.try_write_batch([b"in", b"window"], target=3), "the window"):
        got = _poll_window(ring, 5.0, (8, views), polling)
    assert [(t, bytes(p)) for t, p in got] == [(3, b"in"), (3, b"window")]
    assert ring._poll[1] is got                               # the window counts as a hit
    stats = ring.statistics()
    assert (stats.records_read, stats.payloads_read, stats.bytes_read) == (1, 2, 16)   # 4-byte length each
    assert stats.poll_windows == stats.poll_hits == 1
    assert stats.occupancy == (HEADER_BYTES + 16 if views else 0)   # views hold their space ...
    ring.release_views()
    assert ring.statistics().occupancy == 0                   # ... until released


def test_an_empty_window_ends_on_time_and_counts_a_miss(ring):
    ring.register_producer()
    assert ring.try_read() == []
    assert not _poll_window(ring, 0.05)
    stats = ring.statistics()
    # a lower bound cannot fail by chance: nothing arrives, so the window polls until its end
    assert (stats.poll_windows, stats.poll_hits) == (1, 0) and stats.read_poll_s >= 0.05


def test_the_window_never_waits_behind_a_record_still_being_written(ring):
    a, b = ring.register_producer(), ring.register_producer()
    assert ring.try_read() == []
    word = begin_write(ring, a, b"slow")                      # A is mid-copy at the scan position
    polling = threading.Event()
    with once(is_polling(ring, polling), lambda: ring.try_write_batch([b"B1"], producer=b), "the window"):
        got = _poll_window(ring, 5.0, polling=polling)
    assert payloads(got) == [b"B1"]                           # B's record passes A's (Fig. 5b)
    assert publish(ring, word)
    assert payloads(ring.try_read()) == [b"slow"]


def test_closing_waits_for_a_window_polling_in_another_thread(ring, wait_until):
    ring.register_producer()
    assert ring.try_read() == []
    result: list = []
    polling = threading.Event()

    def poll() -> None:
        try:
            result.append(_poll_window(ring, 1.0, polling=polling))
        except RingClosedError as e:                           # the Python loop may notice the close first
            result.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    wait_until(is_polling(ring, polling), what="the window to poll")
    ring.close()                                              # must not unmap under the polling loop
    poller.join(5)
    assert not poller.is_alive() and len(result) == 1
    assert not result[0] or isinstance(result[0], RingClosedError)


def test_closing_ends_a_read_sleeping_in_another_thread(ring, wait_until):
    ring.register_producer()
    outcome: list = []

    def read() -> None:
        try:
            outcome.append(ring.read(timeout=10))
        except RingClosedError as e:
            outcome.append(e)

    asleep = announced_asleep(ring)
    reader = threading.Thread(target=read)
    reader.start()
    wait_until(asleep, what="the reader to sleep")
    ring.close()
    reader.join(5)                                            # its read would wait 10 s: the close ended it
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RingClosedError)
