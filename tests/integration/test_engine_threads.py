"""Integration: the worker-thread count changes while a flow runs (C-Stream §4.1)
without losing, duplicating or reordering tuples.

The source releases its tuples in phases; the test moves to the next thread
count only after the sink has shown progress in the current phase, so every
change happens mid-flow whatever the machine's speed.
"""

from __future__ import annotations

import threading

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(120)

TOTAL = 200_000
THREAD_STEPS = (1, 4, 2, 1, 3)
PHASE = TOTAL // len(THREAD_STEPS)


class PhasedSource(es.Operator):
    """Pushes ``range(TOTAL)`` in chunks; before each later phase, waits for its gate.

    Waiting is a suspension (``ctx.sleep``), never a blocked worker thread.
    """

    def __init__(self, gates: list[threading.Event], chunk: int = 500):
        super().__init__(inputs=0, outputs=1)
        self.gates = gates
        self.chunk = chunk

    async def process(self, ctx: es.Context):
        out = ctx.outputs[0]
        for phase, gate in enumerate(self.gates):
            while not gate.is_set():
                if ctx.shutdown_requested:
                    return
                await ctx.sleep(0.0005)
            start = phase * PHASE
            for lo in range(start, start + PHASE, self.chunk):
                await out.push_many(range(lo, min(lo + self.chunk, start + PHASE)))


def alive_workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("elastream-worker") and t.is_alive())


def test_set_threads_while_running_keeps_every_tuple_in_order(policy, wait_until):
    gates = [threading.Event() for _ in THREAD_STEPS]
    flow = es.Flow("elastic")
    (flow.source(PhasedSource(gates), name="src")
     .map(lambda x: x + 1, name="m1")
     .map(lambda x: x * 3, name="m2")
     .map(lambda x: x - 3, name="m3")
     .sink(es.ops.Collect(), name="sink"))

    handle = es.Runner(threads=THREAD_STEPS[0], policy=policy, max_queue_size=256, batch_size=64,
                       seed=9).start(flow)
    try:
        for phase, n in enumerate(THREAD_STEPS):
            if phase > 0:
                # Progress in the previous phase, then change the thread count mid-flow.
                wait_until(lambda: handle.stats().operators["sink"].tuples_in > (phase - 1) * PHASE,
                           timeout=60, what=f"sink progress in phase {phase - 1}")
                assert handle.set_threads(n) == n
            assert handle.threads == n
            stats = handle.stats()
            assert stats.threads == n
            assert not handle.done
            gates[phase].set()
            wait_until(lambda: alive_workers() == n, timeout=10,
                       what=f"{n} live worker threads after set_threads({n})")
        result = handle.wait(60)
    finally:
        if not handle.done:
            handle.shutdown()

    assert result.outputs["sink"] == list(range(0, 3 * TOTAL, 3))
    assert result.stats.operators["sink"].tuples_in == TOTAL
    workers = result.stats.workers
    assert len(workers) >= max(THREAD_STEPS)
    for w in workers:
        assert 0.0 <= w.utilisation <= 1.0
        assert w.busy_s >= 0.0 and w.idle_s >= 0.0


def test_set_threads_rejects_zero():
    flow = es.Flow("zero")
    flow.source(range(10)).sink(es.ops.Collect(), name="out")
    handle = es.Runner(threads=2).start(flow)
    try:
        with pytest.raises(ValueError):
            handle.set_threads(0)
    finally:
        result = handle.wait(30)
    assert result.outputs["out"] == list(range(10))
