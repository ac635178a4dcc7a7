"""``elastream bench ipc``: shared-memory ring vs multiprocessing.Queue vs TCP loopback (TurboStream Fig. 8).

A producer process sends messages (a 24-byte header with the send time, then
a body of the chosen size) at a fixed rate to a consumer process; the
consumer stamps arrival with ``time.perf_counter()`` (CLOCK_MONOTONIC, one
clock for every process on Linux) and reports one-way latency p50 / p99.
Three sweeps, as in Fig. 8: (a) message size 10-320 KB at 100 msg/s, (b) rate
100-3,000 msg/s at 40 KB, (c) ring size at 3,000 msg/s and 40 KB (ring only).
Transports: the :class:`~elastream.ipc.SharedRing` (header and body gathered
straight into shared memory, read in place with ``read_views``: one copy,
TurboStream's point), ``multiprocessing.Queue`` (the tuple ``(header,
body)``: pickled by a feeder thread, through a pipe) and a TCP socket on
127.0.0.1 (``sendmsg`` of header and body, ``TCP_NODELAY``; the Netty
stand-in). The sender sleeps until each send time (``--pace spin`` polls the
clock for the last millisecond instead); the consumer waits the transport's
own way (the ring: a 50 µs poll, then — when records come at a steady
pace — a sleep until just before the next one is expected and a short
poll around it, else its wake-up pipe; the table shows each consumer's CPU
share, which is what its way of waiting costs). At 100 msg/s both
ends idle between messages, and on this VM code that has not run for a few
milliseconds runs 5-15x slower at first (caches and predictors lost, an
interrupt to wake an idle vCPU), so one-way latency there is dominated by how
much code each transport runs per message: the ring's common write and read
are one C call each (``elastream.ipc._ringfast``), TCP's one syscall each.

Then small-tuple throughput: batches of 256 ``(int, int, str)`` tuples per
record, ring + :class:`~elastream.ipc.PickleCodec` vs a Queue of the same
lists (both pickle the same list once per batch). Processes start with
``spawn`` (or ``--start-method forkserver``); every message count is bounded
and every wait has a timeout.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import struct
import time
import traceback
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.bench._common import fmt, machine

TRANSPORTS = ("ring", "queue", "tcp")
_HEAD = struct.Struct("<Qdq")          # body length, send time, sequence number
_WARMUP = 10                           # messages per point not measured
_POINT_GAP = 0.05                      # s between points
_SPIN_LEAD = 0.001                     # s before a send that a "spin"-paced sender stops sleeping
_TIMEOUT = 60.0
_KB = 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench ipc``."""
    parser.add_argument("--sizes-kb", type=int, nargs="+", default=[10, 20, 40, 80, 160, 320],
                        help="message sizes of sweep (a), KB")
    parser.add_argument("--size-rate", type=float, default=100.0, help="msg/s of sweep (a)")
    parser.add_argument("--rates", type=float, nargs="+", default=[100, 500, 1000, 2000, 3000],
                        help="rates of sweep (b), msg/s")
    parser.add_argument("--rate-size-kb", type=int, default=40, help="message size of sweeps (b) and (c), KB")
    parser.add_argument("--ring-multiples", type=float, nargs="+", default=[3, 6, 12, 25, 50, 100],
                        help="ring sizes of sweep (c), in messages")
    parser.add_argument("--ring-rate", type=float, default=3000.0, help="msg/s of sweep (c)")
    parser.add_argument("--ring-bytes", type=int, default=2 << 20, help="ring size of sweeps (a), (b) (2 MB)")
    parser.add_argument("--messages", type=int, default=100, help="measured messages per point (at least)")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="at higher rates, send for this long per point (rate x seconds messages)")
    parser.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS))
    parser.add_argument("--tuples", type=int, default=2_000_000, help="small tuples in the throughput test")
    parser.add_argument("--batch", type=int, default=256, help="tuples per record in the throughput test")
    parser.add_argument("--repeat", type=int, default=3, help="throughput repetitions; the best is reported")
    parser.add_argument("--start-method", choices=("spawn", "forkserver"), default="spawn")
    parser.add_argument("--pace", choices=("sleep", "spin"), default="sleep",
                        help="how the sender waits for its next send time: sleep (default) idles until then; "
                             "spin sleeps until 1 ms before and then polls the clock (a sender on-CPU, but it "
                             "competes for the 2 cores with the consumer and with a Queue's feeder thread)")
    parser.add_argument("--quick", action="store_true", help="a few points and messages (for tests)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the three latency sweeps and the throughput test; return a JSON-ready dict."""
    if args.quick:
        args.sizes_kb, args.rates, args.ring_multiples = [10, 320], [100, 3000], [3, 50]
        args.messages, args.seconds, args.tuples, args.repeat = 20, 0.05, 100_000, 1
    ctx = mp.get_context(args.start_method)
    transports = list(args.transports)

    def count(rate: float) -> int:
        return max(args.messages, int(rate * args.seconds))

    size_points = [(kb * _KB, args.size_rate, count(args.size_rate)) for kb in args.sizes_kb]
    rate_points = [(args.rate_size_kb * _KB, rate, count(rate)) for rate in args.rates]
    by_size = _sweep(ctx, transports, size_points, args.ring_bytes, args.pace)
    by_rate = _sweep(ctx, transports, rate_points, args.ring_bytes, args.pace)
    size_rows = [_row(p, by_size, i) | {"size_kb": kb, "rate": args.size_rate}
                 for i, (kb, p) in enumerate(zip(args.sizes_kb, size_points))]
    rate_rows = [_row(p, by_rate, i) | {"size_kb": args.rate_size_kb, "rate": rate}
                 for i, (rate, p) in enumerate(zip(args.rates, rate_points))]
    ring_rows = []
    if "ring" in transports:
        message = args.rate_size_kb * _KB
        for multiple in args.ring_multiples:
            ring_bytes = max(int(message * multiple), 2 * (message + 256))
            [stats] = _run_pair(ctx, "ring", [(message, args.ring_rate, count(args.ring_rate))], ring_bytes,
                                args.pace)
            ring_rows.append({"ring_bytes": ring_bytes, "multiple": multiple, "size_kb": args.rate_size_kb,
                              "rate": args.ring_rate, "ring": stats})
    throughput = _throughput(ctx, args) if {"ring", "queue"} <= set(transports) else None
    return {
        "benchmark": "ipc", "start_method": args.start_method, "pace": args.pace, "transports": transports,
        "ring_bytes": args.ring_bytes, "warmup_messages": _WARMUP,
        "latency_vs_size": size_rows, "latency_vs_rate": rate_rows, "latency_vs_ring_size": ring_rows,
        "throughput": throughput, "summary": _summary(size_rows + rate_rows, throughput),
        "note": "one-way latency, microseconds; ratio = ring / baseline (below 1 is better), "
                "reduction = 1 - ratio (TurboStream reports 45-99% against Netty)",
        "machine": machine(),
    }


# -- latency: orchestration -------------------------------------------------------------------------
def _sweep(ctx: Any, transports: list[str], points: list[tuple[int, float, int]], ring_bytes: int,
           pace: str) -> dict[str, list[dict[str, float]]]:
    """One producer/consumer pair per transport runs every point in turn."""
    return {t: _run_pair(ctx, t, points, ring_bytes, pace) for t in transports}


def _run_pair(ctx: Any, transport: str, points: list[tuple[int, float, int]], ring_bytes: int,
              pace: str) -> list[dict[str, float]]:
    results = ctx.Queue()
    ring = None
    procs: list[Any] = []
    try:
        if transport == "ring":
            from elastream.ipc import SharedRing

            largest = max(size for size, _, _ in points)
            ring = SharedRing.create(max(ring_bytes, 2 * (largest + 256)), producers=1)
            channel: Any = ring.name
        elif transport == "queue":
            channel = ctx.Queue()
        else:
            channel = None
        consumer = ctx.Process(target=_consumer_main, args=(transport, channel, points, results),
                               name=f"ipc-consumer-{transport}")
        procs.append(consumer)
        consumer.start()
        if transport == "tcp":
            kind, channel = results.get(timeout=_TIMEOUT)        # the consumer's port
            if kind != "port":
                raise RuntimeError(f"tcp consumer failed to listen: {channel}")
        producer = ctx.Process(target=_producer_main, args=(transport, channel, points, pace, results),
                               name=f"ipc-producer-{transport}")
        procs.append(producer)
        producer.start()
        kind, value = results.get(timeout=_TIMEOUT + sum(n / r for _, r, n in points))
        if kind != "latency":
            raise RuntimeError(f"{transport} benchmark process failed:\n{value}")
        return value
    finally:
        _stop(procs, ring)


def _stop(procs: list, ring: Any) -> None:
    """Join (or kill) the benchmark's processes and close its ring, whatever happened."""
    for p in procs:
        if p.pid is None:                  # never started
            continue
        p.join(_TIMEOUT)
        if p.is_alive():
            p.kill()
            p.join(5)
    if ring is not None:
        ring.close()


def _row(point: tuple[int, float, int], by_transport: dict[str, list[dict[str, float]]], i: int) -> dict:
    row: dict[str, Any] = {"messages": point[2]}
    for transport, stats in by_transport.items():
        row[transport] = stats[i]
    if "ring" in row:
        for base in ("queue", "tcp"):
            if base in row:
                for q in ("p50", "p99"):
                    row[f"ring_vs_{base}_{q}"] = row["ring"][f"{q}_us"] / row[base][f"{q}_us"]
    return row


def _summary(rows: list[dict], throughput: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in rows:                   # a point measured in both sweeps (40 KB at 100 msg/s) counts its worse run
        if row["rate"] <= 100:
            for base in ("queue", "tcp"):
                key = f"ring_vs_{base}_p50"
                if key in row:
                    name = f"{row['size_kb']}kb_p50_reduction_vs_{base}"
                    out[name] = min(out.get(name, 1.0), 1 - row[key])
    if throughput:
        out["throughput_ratio_ring_vs_queue"] = throughput["ratio"]
    return out


# -- latency: the two processes ---------------------------------------------------------------------
def _producer_main(transport: str, channel: Any, points: list[tuple[int, float, int]], pace: str,
                   results: Any) -> None:
    try:
        end = _open(transport, channel, producer=True)
        clock = time.perf_counter
        try:
            for size, rate, count in points:
                body = bytes(size)
                time.sleep(_POINT_GAP)             # the consumer finishes the previous point
                interval, t_next = 1.0 / rate, clock()
                for seq in range(_WARMUP + count):
                    delay = t_next - clock()
                    if pace == "sleep":
                        if delay > 0:
                            time.sleep(delay)
                    else:
                        if delay > _SPIN_LEAD:
                            time.sleep(delay - _SPIN_LEAD)
                        while clock() < t_next:     # the harness's pacing, not the transport's waiting:
                            time.sleep(0)           # on-CPU, yet lets a Queue's feeder thread take the GIL
                    end.send(_HEAD.pack(size, clock(), seq), body)
                    t_next += interval
        finally:
            end.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(("error", traceback.format_exc()))


def _consumer_main(transport: str, channel: Any, points: list[tuple[int, float, int]], results: Any) -> None:
    try:
        end = _open(transport, channel, producer=False, results=results)
        out = []
        try:
            for size, _, count in points:
                latencies = []
                for seq in range(_WARMUP + count):
                    if seq == _WARMUP:
                        cpu0, wall0, polls0 = time.process_time(), time.perf_counter(), end.polls()
                    length, t_send, got = end.recv()
                    arrived = time.perf_counter()
                    if got != seq or length != size:
                        raise RuntimeError(f"message {got} ({length} B) arrived, expected {seq} ({size} B)")
                    if seq >= _WARMUP:
                        latencies.append(arrived - t_send)
                # the consumer's CPU share over the measured messages: what its way of waiting costs
                polls = [b - a for a, b in zip(polls0, end.polls())]
                out.append((latencies, (time.process_time() - cpu0) / (time.perf_counter() - wall0), polls))
        finally:
            end.close()
        results.put(("latency", [_latency_stats(*point) for point in out]))   # after the run: no stall mid-run
    except BaseException:  # noqa: BLE001
        results.put(("error", traceback.format_exc()))


def _latency_stats(latencies: list[float], consumer_cpu: float, polls: list[int]) -> dict[str, float]:
    import numpy as np

    us = np.asarray(latencies) * 1e6
    p50, p99 = np.percentile(us, [50, 99])
    stats = {"p50_us": float(p50), "p99_us": float(p99), "mean_us": float(us.mean()), "max_us": float(us.max()),
             "n": len(latencies), "consumer_cpu": consumer_cpu}
    if polls:
        stats["poll_windows"], stats["poll_hits"] = polls
    return stats


def _open(transport: str, channel: Any, *, producer: bool, results: Any = None) -> Any:
    if transport == "ring":
        return _RingEnd(channel, producer)
    if transport == "queue":
        return _QueueEnd(channel)
    return _TcpEnd(channel, producer, results)


class _RingEnd:
    """Header and body gathered into one ring record; the consumer copies the record out."""

    def __init__(self, name: str, producer: bool):
        from elastream.ipc import SharedRing

        self.ring = SharedRing.attach(name)
        self.producer = producer
        if producer:
            self.ring.register_producer()

    def send(self, header: bytes, body: bytes) -> None:
        self.ring.write_batch([[header, body]], timeout=_TIMEOUT)

    def polls(self) -> list[int]:
        stats = self.ring.statistics()
        return [stats.poll_windows, stats.poll_hits]

    def recv(self) -> tuple[int, float, int]:
        # in place: the producer's write was the only copy (the view lives until the next read)
        [(_, payload)] = self.ring.read_views(1, timeout=_TIMEOUT)
        length, t_send, seq = _HEAD.unpack_from(payload)
        if len(payload) != _HEAD.size + length:
            raise RuntimeError("torn ring message")
        return length, t_send, seq

    def close(self) -> None:
        if self.producer:
            self.ring.close_producer()
        self.ring.close()


class _QueueEnd:
    """The tuple (header, body) through multiprocessing.Queue (pickled by its feeder thread, sent on a pipe)."""

    def __init__(self, queue: Any):
        self.queue = queue

    def polls(self) -> list[int]:
        return []

    def send(self, header: bytes, body: bytes) -> None:
        self.queue.put((header, body))

    def recv(self) -> tuple[int, float, int]:
        header, body = self.queue.get(timeout=_TIMEOUT)
        length, t_send, seq = _HEAD.unpack(header)
        if len(body) != length:
            raise RuntimeError("torn queue message")
        return length, t_send, seq

    def close(self) -> None:
        self.queue.close()
        self.queue.join_thread()


class _TcpEnd:
    """Length-prefixed messages over one TCP connection on 127.0.0.1 (sendmsg gathers header and body)."""

    def __init__(self, port: int | None, producer: bool, results: Any):
        if producer:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            with socket.create_server(("127.0.0.1", 0)) as server:
                server.settimeout(_TIMEOUT)
                results.put(("port", server.getsockname()[1]))
                self.sock, _ = server.accept()
            self.sock.settimeout(_TIMEOUT)
            self.buf = bytearray(_HEAD.size)

    def polls(self) -> list[int]:
        return []

    def send(self, header: bytes, body: bytes) -> None:
        views = [memoryview(header), memoryview(body)]
        while views:
            sent = self.sock.sendmsg(views)
            while views and sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            if views and sent:
                views[0] = views[0][sent:]

    def recv(self) -> tuple[int, float, int]:
        self._recv_exact(memoryview(self.buf))
        length, t_send, seq = _HEAD.unpack(self.buf)
        body = bytearray(length)
        self._recv_exact(memoryview(body))
        return length, t_send, seq

    def _recv_exact(self, view: memoryview) -> None:
        while view:
            n = self.sock.recv_into(view)
            if n == 0:
                raise ConnectionError("tcp producer closed the connection early")
            view = view[n:]

    def close(self) -> None:
        self.sock.close()


# -- throughput -------------------------------------------------------------------------------------
def _throughput(ctx: Any, args: argparse.Namespace) -> dict[str, Any]:
    batches = max(1, args.tuples // args.batch)
    best: dict[str, float] = {}
    for _ in range(max(1, args.repeat)):
        for transport in ("ring", "queue"):
            rate = _throughput_once(ctx, transport, batches, args.batch, args.ring_bytes)
            best[transport] = max(best.get(transport, 0.0), rate)
    return {"tuples": batches * args.batch, "batch": args.batch, "repetitions": args.repeat,
            "ring_tuples_per_s": best["ring"], "queue_tuples_per_s": best["queue"],
            "ratio": best["ring"] / best["queue"]}


def _throughput_once(ctx: Any, transport: str, batches: int, batch: int, ring_bytes: int) -> float:
    results = ctx.Queue()
    ring = None
    procs: list[Any] = []
    try:
        if transport == "ring":
            from elastream.ipc import SharedRing

            ring = SharedRing.create(ring_bytes, producers=1)
            channel: Any = ring.name
        else:
            channel = ctx.Queue()
        procs = [ctx.Process(target=_tput_consumer, args=(transport, channel, results)),
                 ctx.Process(target=_tput_producer, args=(transport, channel, batches, batch, results))]
        for p in procs:
            p.start()
        got: dict[str, Any] = {}
        while len(got) < 2:
            kind, value = results.get(timeout=_TIMEOUT * 2)
            if kind == "error":
                raise RuntimeError(f"{transport} throughput process failed:\n{value}")
            got[kind] = value
        count, t_end = got["end"]
        if count != batches * batch:
            raise RuntimeError(f"{transport}: {count} tuples arrived, {batches * batch} sent")
        return count / (t_end - got["start"])
    finally:
        _stop(procs, ring)


def _tput_producer(transport: str, channel: Any, batches: int, batch: int, results: Any) -> None:
    try:
        tuples = [(i, i * 2, "key") for i in range(batch)]
        if transport == "ring":
            from elastream.ipc import PickleCodec, SharedRing

            ring, encode = SharedRing.attach(channel), PickleCodec().encode_batch
            ring.register_producer()
            results.put(("start", time.perf_counter()))
            for _ in range(batches):
                ring.write_batch([encode(tuples)], timeout=_TIMEOUT)
            ring.close_producer()
            ring.close()
        else:
            results.put(("start", time.perf_counter()))
            for _ in range(batches):
                channel.put(tuples)
            channel.put(None)
            channel.close()
            channel.join_thread()
    except BaseException:  # noqa: BLE001
        results.put(("error", traceback.format_exc()))


def _tput_consumer(transport: str, channel: Any, results: Any) -> None:
    try:
        count = 0
        if transport == "ring":
            from elastream.ipc import PickleCodec, SharedRing

            ring, decode = SharedRing.attach(channel), PickleCodec().decode_batch
            while True:
                records = ring.read_views(64, timeout=_TIMEOUT)     # decoded in place: one copy in all
                if not records:
                    break
                for _, payload in records:
                    count += len(decode(payload))
            ring.close()
        else:
            while (item := channel.get(timeout=_TIMEOUT)) is not None:
                count += len(item)
        results.put(("end", (count, time.perf_counter())))
    except BaseException:  # noqa: BLE001
        results.put(("error", traceback.format_exc()))


# -- report -----------------------------------------------------------------------------------------
def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as rich tables."""
    transports = result["transports"]
    for key, title, col in (("latency_vs_size", "(a) one-way latency vs message size", "size KB"),
                            ("latency_vs_rate", "(b) one-way latency vs rate", "msg/s")):
        rows = result[key]
        if not rows:
            continue
        table = Table(title=f"{title} (µs, p50 / p99)")
        table.add_column(col, justify="right")
        table.add_column("rate" if col == "size KB" else "size KB", justify="right")
        for t in transports:
            table.add_column(t, justify="right")
        bases = [b for b in ("queue", "tcp") if b in transports and "ring" in transports]
        for b in bases:
            table.add_column(f"ring/{b} p50 · p99", justify="right")
        table.add_column("consumer CPU " + " · ".join(transports), justify="right")
        if "ring" in transports:
            table.add_column("ring polls hit", justify="right")
        for r in rows:
            cells = [f"{r['size_kb']}" if col == "size KB" else f"{r['rate']:,.0f}",
                     f"{r['rate']:,.0f}" if col == "size KB" else f"{r['size_kb']}"]
            cells += [f"{fmt(r[t]['p50_us'], 0)} / {fmt(r[t]['p99_us'], 0)}" for t in transports]
            cells += [f"{r[f'ring_vs_{b}_p50']:.2f} · {r[f'ring_vs_{b}_p99']:.2f}" for b in bases]
            cells.append(" · ".join(f"{r[t].get('consumer_cpu', 0):.0%}" for t in transports))
            if "ring" in transports:
                ring = r["ring"]
                cells.append(f"{ring.get('poll_hits', 0)}/{ring['n']}")
            table.add_row(*cells)
        console.print(table)
    if result["latency_vs_ring_size"]:
        table = Table(title="(c) ring latency vs ring size (µs)")
        for c in ("ring KB", "messages", "size KB", "msg/s", "p50", "p99", "mean"):
            table.add_column(c, justify="right")
        for r in result["latency_vs_ring_size"]:
            s = r["ring"]
            table.add_row(f"{r['ring_bytes'] / _KB:,.0f}", f"{r['multiple']:g}", str(r["size_kb"]),
                          f"{r['rate']:,.0f}", fmt(s["p50_us"], 0), fmt(s["p99_us"], 0), fmt(s["mean_us"], 0))
        console.print(table)
    tp = result["throughput"]
    if tp:
        console.print(f"small-tuple throughput, {tp['batch']} tuples per record, {tp['tuples']:,} tuples "
                      f"(best of {tp['repetitions']}): ring {fmt(tp['ring_tuples_per_s'], 0)} tuples/s, "
                      f"Queue {fmt(tp['queue_tuples_per_s'], 0)} tuples/s → ring/Queue {tp['ratio']:.2f}x")
    for key, value in result["summary"].items():
        if "reduction" in key:
            console.print(f"{key}: {value:.0%}")
    console.print(result["note"])
    console.print(f"load average (1 min) at the end: {result['machine']['load_average_1min']:.2f} "
                  f"on {result['machine']['cpus']} cores")
