"""IBM Streams' dynamic scheduler (``policy="ibm"``, §4.1 Figs. 3–5) under real threads.

The contract suites run every flow under it too (it is a registered policy); these tests check what
the discipline itself promises: one consumer per operator at a time, a bounded and never nested
reSchedule, threads that come and go losing and duplicating nothing, O(1) picks in least recently
executed order, and idle workers that back off instead of being woken.
"""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.policies.ibm import IbmStreamsPolicy

pytestmark = pytest.mark.timeout(60)


class ConsumerSection:
    """A Map function counting the workers inside it at once (the operator's consumer section).

    It sleeps briefly inside (the GIL is released), so two workers that could enter together would.
    """

    def __init__(self, log: dict[str, int], name: str):
        self.log, self.name = log, name
        self.inside = 0
        self.lock = threading.Lock()

    def __call__(self, x):
        with self.lock:
            self.inside += 1
            self.log[self.name] = max(self.log.get(self.name, 0), self.inside)
        time.sleep(0.00002)
        with self.lock:
            self.inside -= 1
        return x


def _sections_flow(n: int, log: dict[str, int], width: int = 4) -> es.Flow:
    flow = es.Flow("sections")
    stream = flow.source(range(n), name="src")
    for i in range(width):
        stream = stream.map(ConsumerSection(log, f"s{i}"), name=f"s{i}")
    stream.sink(es.ops.Collect(), name="out")
    return flow


def _runner(policy: str, threads: int, **options) -> es.Runner:
    return es.Runner(threads=threads, policy=policy, elastic=False, batch_size=16, max_queue_size=64,
                     scheduling=es.SchedulingConfig(fuse=False), **options)


def test_never_two_workers_in_one_operators_consumer_section_at_8_threads():
    log: dict[str, int] = {}
    result = _runner("ibm", 8).run(_sections_flow(5_000, log), timeout=50)
    assert result.outputs["out"] == list(range(5_000))
    assert log and max(log.values()) == 1, log


def test_the_section_counter_sees_two_workers_where_an_operator_is_shared():
    """The instrument can fail: the default policy lets several workers run one stateless operator."""
    log: dict[str, int] = {}
    _runner("least_recently_run", 8).run(_sections_flow(5_000, log, width=1), timeout=50)
    assert log["s0"] >= 2, log


def test_reschedule_runs_full_consumers_within_its_bound_and_never_nests():
    flow = es.Flow("full")
    (flow.source(range(30_000), name="src").map(lambda x: x + 1, name="a")
     .then(es.ops.Busy(cost_us=20.0), name="slow").sink(es.ops.Collect(), name="out"))
    handle = _runner("ibm", 2).start(flow)
    result = handle.wait(50)
    assert result.outputs["out"] == [x + 1 for x in range(30_000)]
    stats = [w.reschedule for w in handle.pool.workers]
    assert sum(s.runs for s in stats) > 0                        # producers met full queues and ran consumers
    limit = max(s.limit for s in stats)
    assert limit == 64 // 4                                       # a quarter of the queue (RESCHED_LIMIT)
    assert max(s.most_tuples for s in stats) <= limit
    assert sum(s.nested for s in stats) == 0


def test_threads_added_and_removed_mid_run_lose_and_duplicate_nothing():
    log: dict[str, int] = {}
    n = 10_000
    handle = _runner("ibm", 2).start(_sections_flow(n, log))
    for threads in (6, 1, 4, 2):
        time.sleep(0.05)
        handle.set_threads(threads)
    result = handle.wait(50)
    assert result.outputs["out"] == list(range(n))
    assert max(log.values()) == 1


def test_pick_takes_the_front_of_the_free_list_whatever_its_length():
    policy = IbmStreamsPolicy()
    ready = {f"op{i}": None for i in range(1000)}
    assert policy.pick(ready.keys(), 0.0) == "op0"
    del ready["op0"]
    ready["op0"] = None                      # executed, then ready again: back of the list
    assert policy.pick(ready.keys(), 0.0) == "op1"


def test_idle_workers_back_off_to_10_ms_instead_of_being_woken():
    flow = es.Flow("idle")
    flow.source(es.ops.RateLimited(range(20), rate=50), name="src").sink(es.ops.Collect(), name="out")
    handle = _runner("ibm", 3).start(flow)
    time.sleep(0.2)
    waits = [w.backoff_s for w in handle.pool.workers]
    result = handle.wait(20)
    assert result.outputs["out"] == list(range(20))
    assert handle.sched.backoff == (0.0001, 0.010)
    assert max(waits) == pytest.approx(0.010)                    # an idle worker's wait grew to IBM's cap
