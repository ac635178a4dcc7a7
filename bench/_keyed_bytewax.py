"""The Bytewax row of ``elastream bench keyed``: the same running sum per key on Bytewax with two processes.

Bytewax (a Python stream processor on Timely Dataflow, in Rust) as its users
write this job: ``input`` from the list of tuples (one partition: a key's
tuples must be read in order, so one worker reads them all), ``key_on`` the
key, ``stateful_map`` adding the per-tuple function to the key's running sum,
``output`` into a list. Two processes run ``bytewax.testing.cluster_main``
with one worker each and exchange the tuples by key over TCP.

Bytewax keeps each key's order, not the order across keys: the driver sorts
the outputs by their input position afterwards (not timed) and checks them
against the plain loop's. Timed: from the moment both processes have built
the dataflow (a barrier) until the later one has finished. Not timed: starting
the two processes (spawned), building the dataflow, sorting the outputs.
Worker 1 starts STAGGER_S after worker 0, which must be listening before
worker 1 connects (else it retries a second later).

Needs the ``compare`` extra (``pip install -e '.[compare]'``; ``make`` installs it).
GIL case: each process has its own interpreter: process parallelism.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from typing import Any

#: Delay of worker 1's start after worker 0's (inside the timed span).
STAGGER_S = 0.05
#: Tuples the input hands on at a time.
INPUT_BATCH = 256
#: Seconds to wait for a worker process's result before giving up.
TIMEOUT_S = 600.0


def available() -> bool:
    """True when Bytewax can be imported."""
    try:
        import bytewax.testing  # noqa: F401
    except ImportError:
        return False
    return True


def build_dataflow(data: list[tuple[int, int]], rounds: int, out: list) -> Any:
    """input → key_on(key) → stateful_map(running sum + burn) → output into ``out``, as ``(seq, key, sum)``."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource

    from elastream.bench.keyed import burn

    def add(total: int | None, item: tuple[int, tuple[int, int]]) -> tuple[int, tuple[int, int, int]]:
        seq, (key, value) = item
        total = (total or 0) + burn(value, rounds)
        return total, (seq, key, total)

    flow = Dataflow("keyed")
    tuples = op.input("in", flow, TestingSource(list(enumerate(data)), batch_size=INPUT_BATCH))
    keyed = op.key_on("key", tuples, lambda item: str(item[1][0]))
    sums = op.stateful_map("sum", keyed, add)
    op.output("out", op.map("value", sums, lambda key_and_value: key_and_value[1]), TestingSink(out))
    return flow


def run_two_processes(data: list[tuple[int, int]], rounds: int) -> tuple[float, list[tuple[int, int]]]:
    """Run the dataflow on two processes; (seconds, the ``(key, sum)`` outputs in input order)."""
    ctx = mp.get_context("spawn")  # the bench process has threads (a pool, maybe Spark's): no fork
    addresses = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(i, data, rounds, addresses, barrier, results), daemon=True)
             for i in range(2)]
    for p in procs:
        p.start()
    done = []
    try:
        for _ in procs:
            message = results.get(timeout=TIMEOUT_S)
            if message[0] == "failed":  # its peer may wait for it forever: the finally kills both
                raise RuntimeError(f"a Bytewax worker failed:\n{message[1]}")
            done.append(message)
    finally:
        for p in procs:
            p.join(5.0 if len(done) == len(procs) else 0.0)
            if p.is_alive():
                p.kill()
                p.join()
    seconds = max(d[3] for d in done) - min(d[2] for d in done)
    outputs = sorted(x for d in done for x in d[4])
    return seconds, [(key, total) for _, key, total in outputs]


def _worker(index: int, data: list, rounds: int, addresses: list[str], barrier: Any, results: Any) -> None:
    import traceback

    try:
        from bytewax.testing import cluster_main

        out: list = []
        flow = build_dataflow(data, rounds, out)
        barrier.wait()
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: comparable across the processes of this machine
        if index:
            time.sleep(STAGGER_S)
        cluster_main(flow, addresses, index, worker_count_per_proc=1)
        results.put(("done", index, t0, time.perf_counter(), out))
    except BaseException:  # noqa: BLE001 - reported to the driver
        results.put(("failed", traceback.format_exc()))


def _free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
