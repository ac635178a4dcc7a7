"""Dynamic allotment keeps Definition 5.1 for every reorder and partitioning scheme (threads only).

Random linear pipelines of stateless / partitioned / stateful function
operators, run with random worker counts, batch and queue sizes and both
reorder (``nonblocking`` / ``lock``) and partitioning (``hybrid`` /
``partitioned``) schemes, must produce exactly the output sequence of a
sequential one-tuple-at-a-time run. (The process axis is covered by
``test_definition51.py``.)
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es

STAGES = ("map", "filter", "flat_map", "keyed", "stateful")


def apply_sequentially(stages: list[tuple[str, int]], items: list[int]) -> list:
    """The reference: each stage over the whole list, one tuple at a time."""
    for kind, k in stages:
        if kind == "map":
            items = [x * 3 + k for x in items]
        elif kind == "filter":
            items = [x for x in items if x % (k + 2)]
        elif kind == "flat_map":
            items = [x + j for x in items for j in range(x % (k + 1))]
        elif kind == "keyed":
            sums: dict[int, int] = {}
            out = []
            for x in items:
                sums[x % (k + 3)] = sums.get(x % (k + 3), 0) + x
                out.append(sums[x % (k + 3)])
            items = out
        else:
            total, out = 0, []
            for x in items:
                total += x
                out.append(total % 1000)
            items = out
    return items


def build(stages: list[tuple[str, int]], items: list[int], partitions: int) -> es.Flow:
    flow = es.Flow("random")
    s = flow.source(es.ops.FromIterable(items), name="src")
    for kind, k in stages:
        if kind == "map":
            s = s.map(lambda x, k=k: x * 3 + k)
        elif kind == "filter":
            s = s.filter(lambda x, k=k: x % (k + 2))
        elif kind == "flat_map":
            s = s.flat_map(lambda x, k=k: [x + j for j in range(x % (k + 1))])
        elif kind == "keyed":
            s = s.key_by(lambda x, k=k: x % (k + 3), partitions=partitions).process(
                lambda total, x: (total + x, [total + x]), state=int)
        else:
            s = s.process(lambda total, x: (total + x, [(total + x) % 1000]), state=int, kind="stateful")
    s.collect(name="out")
    return flow


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.lists(st.tuples(st.sampled_from(STAGES), st.integers(0, 4)), min_size=1, max_size=5),
       items=st.lists(st.integers(0, 50), max_size=400),
       threads=st.integers(1, 8), partitions=st.integers(1, 6),
       reorder=st.sampled_from(["nonblocking", "lock"]), partitioning=st.sampled_from(["hybrid", "partitioned"]),
       batch_size=st.sampled_from([1, 3, 16, 256]), queue=st.sampled_from([2, 8, 1024]))
def test_outputs_equal_a_sequential_run(stages, items, threads, partitions, reorder, partitioning, batch_size,
                                        queue):
    flow = build(stages, items, partitions)
    runner = es.Runner(threads=threads, ordering=es.OrderingConfig(reorder=reorder, partitioning=partitioning),
                       batch_size=batch_size,
                       max_queue_size=queue)
    assert runner.run(flow, timeout=60).outputs.get("out", []) == apply_sequentially(stages, items)
