"""The shared-memory ring across processes: exactly-once delivery, order, end-of-stream, crashes, cleanup.

* hypothesis: 2-3 producer processes (fork, for speed) × the test process as
  consumer, random record sizes that force wrap-around and full-ring waits;
* spawned producers and a spawned consumer process, the ring handed over by
  pickling (attach by name), end-of-stream seen by the consumer;
* a producer killed with SIGKILL in the middle of a write — with its record
  WRITING, or with space reserved but no header yet — is skipped by the
  consumer (no hang), named by ``failed_producers()``, and a supervisor can
  close it so the stream ends;
* a script run in a fresh interpreter shows that attaching in a spawned child
  leaves no resource-tracker warnings and no segment in ``/dev/shm``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream.ipc.ring as ring_mod
from elastream.ipc import SharedRing
from ring_payloads import PAYLOAD_HEAD, make_payload, parse_payload
from ring_segments_check import ring_segments

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

FORK = mp.get_context("fork")
SPAWN = mp.get_context("spawn")


def check_delivery(delivered: list[tuple[int, bytes]], sent_counts: dict[int, int]) -> None:
    per_producer: dict[int, list[int]] = defaultdict(list)
    for target, payload in delivered:
        producer, seq = parse_payload(payload)
        assert target == producer
        per_producer[producer].append(seq)
    for producer, count in sent_counts.items():
        assert per_producer.get(producer, []) == list(range(count)), f"producer {producer} out of order or lost"
    assert set(per_producer) <= set(sent_counts)


def read_to_eof(ring: SharedRing, max_records: int = 16, timeout: float = 30.0) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while True:
        records = ring.read(max_records, timeout=timeout)
        if not records:
            return out
        out.extend(records)


# -- process entry points (module level: spawn imports them by name) --------------------------------------
def produce(ring: SharedRing | str, batches: list[list[int]]) -> None:
    """Register, write ``batches`` (lists of body sizes) as batch records, close the producer."""
    ring = SharedRing.attach(ring) if isinstance(ring, str) else ring
    try:
        me = ring.register_producer()
        seq = 0
        for sizes in batches:
            batch = []
            for n in sizes:
                batch.append(make_payload(me, seq, n))
                seq += 1
            ring.write_batch(batch, target=me, timeout=60)
        ring.close_producer(me)
    finally:
        ring.close()


def consume(ring: SharedRing, expected: dict[int, int], results) -> None:
    """Read to end-of-stream in this process; report "ok" or the failure to ``results``."""
    try:
        delivered = read_to_eof(ring)
        check_delivery(delivered, expected)
        stats = ring.statistics()
        assert stats.sequence_errors == 0 and stats.failed_records_skipped == 0
        results.put(("ok", len(delivered)))
    except BaseException as error:  # noqa: BLE001 - reported to the test process
        results.put(("error", repr(error)))
    finally:
        ring.close()


def stall_mid_write(name: str, mode: str, ready) -> None:
    """Write one good record, then reserve space and stop mid-write (``mode``: "writing" or "no-header")."""
    ring = SharedRing.attach(name)
    me = ring.register_producer()
    ring.write_batch([make_payload(me, 0, 100)], target=me, timeout=10)
    slot = ring._slot(me)
    payload = make_payload(me, 1, 300)
    parts, lengths = ring_mod._gather([payload])
    length = lengths[0] + 4
    w, pad = ring._reserve(slot, ring_mod._record_size(length))
    if mode == "writing":
        ring._fill(w, pad, slot, me, ring_mod.KIND_BATCH, me, length, parts, lengths)
    ready.send(me)
    time.sleep(120)                                # the test kills us here


# -- tests -----------------------------------------------------------------------------------------------
@st.composite
def process_scenarios(draw):
    capacity = draw(st.sampled_from([4096, 8192, 65536]))
    largest = (capacity // 2 - ring_mod.HEADER_BYTES) // 3 - 4 - PAYLOAD_HEAD.size
    body = st.one_of(st.integers(0, 64), st.integers(0, largest))
    producers = draw(st.lists(st.lists(st.lists(body, min_size=1, max_size=3), min_size=1, max_size=60),
                              min_size=2, max_size=3))
    return capacity, producers, draw(st.integers(1, 8))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(process_scenarios())
def test_producer_processes_deliver_every_record_once_in_order(scenario):
    capacity, producers, read_batch = scenario
    with SharedRing.create(capacity, producers=len(producers)) as ring:
        procs = [FORK.Process(target=produce, args=(ring.name, batches)) for batches in producers]
        for p in procs:
            p.start()
        try:
            delivered = read_to_eof(ring, read_batch)
        finally:
            for p in procs:
                p.join(30)
        assert [p.exitcode for p in procs] == [0] * len(procs)
        # producer ids follow registration order, which the processes race for: map them by content
        counts = defaultdict(int)
        for _, payload in delivered:
            counts[parse_payload(payload)[0]] += 1
        assert sorted(counts.values()) == sorted(sum(map(len, b)) for b in producers)
        check_delivery(delivered, dict(counts))
        stats = ring.statistics()
        assert stats.sequence_errors == 0 and stats.failed_records_skipped == 0 and ring.at_eof


def test_spawned_producers_and_consumer_reach_end_of_stream():
    """Rings travel to spawned processes by pickling (attach by name); end-of-stream crosses processes."""
    with SharedRing.create(16384, producers=2) as ring:
        results = SPAWN.Queue()
        batches = [[200, 3000, 5], [1] * 3] * 30
        consumer = SPAWN.Process(target=consume, args=(ring, {0: 180, 1: 180}, results))
        producers = [SPAWN.Process(target=produce, args=(ring, batches)) for _ in range(2)]
        for p in [consumer, *producers]:
            p.start()
        try:
            status, detail = results.get(timeout=60)
        finally:
            for p in [consumer, *producers]:
                p.join(30)
        assert (status, detail) == ("ok", 360)
        assert [p.exitcode for p in [consumer, *producers]] == [0, 0, 0]
        assert ring.at_eof
        stats = ring.statistics()
        assert stats.records_read == stats.records_written == 120 and stats.producers_closed == 2


@pytest.mark.parametrize("mode", ["writing", "no-header"])
def test_producer_killed_mid_write_is_skipped_not_waited_for(mode):
    with SharedRing.create(16384, producers=2) as ring:
        parent_end, child_end = FORK.Pipe()
        stalled = FORK.Process(target=stall_mid_write, args=(ring.name, mode, child_end))
        stalled.start()
        healthy = None
        try:
            assert parent_end.poll(30), "stalled writer did not start"
            dead_id = parent_end.recv()
            # more than the ring holds: the healthy producer is back-pressured behind the stuck record
            healthy = FORK.Process(target=produce, args=(ring.name, [[500]] * 100))
            healthy.start()
            delivered: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 30
            while ring.statistics().full_events == 0:
                assert time.monotonic() < deadline, "healthy producer never filled the ring"
                ring.wait_readable(0.05)
                delivered += ring.try_read()
            assert ring.failed_producers() == ()
            os.kill(stalled.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            while len(delivered) < 101:                # 1 good record of the dead producer + 100
                delivered += ring.read(timeout=10)
            assert ring.failed_producers() == (dead_id,)
            ring.close_producer(dead_id)               # what a supervisor does for a dead producer
            delivered += read_to_eof(ring, timeout=10)
            assert time.monotonic() - killed_at < 5
        finally:
            stalled.kill()
            stalled.join(10)
            if healthy is not None:
                healthy.join(30)
        assert healthy.exitcode == 0
        check_delivery(delivered, {dead_id: 1, 1 - dead_id: 100})
        stats = ring.statistics()
        assert stats.failed_records_skipped == 1 and stats.sequence_errors == 0
        assert stats.empty_recoveries == (1 if mode == "no-header" else 0)
        assert ring.at_eof


def test_attaching_in_a_spawned_child_leaves_no_tracker_warnings_and_no_segment(tmp_path):
    script = tmp_path / "ring_child.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        from elastream.ipc import SharedRing

        def child(ring):
            ring.register_producer()
            ring.write_batch([b"from child"], timeout=10)
            ring.close_producer()
            ring.close()

        if __name__ == "__main__":
            with SharedRing.create(8192, producers=1) as ring:
                p = mp.get_context("spawn").Process(target=child, args=(ring,))
                p.start()
                assert ring.read(timeout=30) == [(0, b"from child")]
                p.join(30)
                assert p.exitcode == 0 and ring.at_eof
                print(ring.name)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr         # no "leaked shared_memory" warning, no tracker traceback
    assert proc.stdout.strip() not in ring_segments()


def test_ipc_benchmark_runs_end_to_end_on_tiny_settings():
    """``elastream bench ipc`` in miniature: every transport, sweep and ratio is produced."""
    import argparse

    from elastream.bench import ipc

    parser = argparse.ArgumentParser()
    ipc.add_arguments(parser)
    args = parser.parse_args(["--sizes-kb", "10", "--rates", "1000", "--ring-multiples", "3", "--messages", "5",
                              "--seconds", "0.01", "--tuples", "2560", "--repeat", "1"])
    result = ipc.run(args)
    [size_row] = result["latency_vs_size"]
    assert {"ring", "queue", "tcp", "ring_vs_queue_p50", "ring_vs_tcp_p99"} <= set(size_row)
    assert size_row["ring"]["n"] == 5 and size_row["ring"]["p50_us"] > 0
    assert len(result["latency_vs_rate"]) == 1 and len(result["latency_vs_ring_size"]) == 1
    assert result["throughput"]["tuples"] == 2560 and result["throughput"]["ratio"] > 0
    assert "10kb_p50_reduction_vs_tcp" in result["summary"]
