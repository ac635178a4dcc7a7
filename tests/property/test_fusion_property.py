"""Fused and unfused runs of random chains agree exactly (runtime.fusion, threads only).

Random chains of map / filter / flat_map (with an occasional keyed operator
that cuts them in two), run with one and two worker threads and random batch
and queue sizes, must give the same output sequence and the same tuple counts
per operator with fusion on as with one task per operator, and both must
equal the plain sequential reference.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es

STAGES = ("map", "filter", "flat_map", "keyed")


def reference(stages: list[tuple[str, int]], items: list[int]) -> list[int]:
    """Each stage over the whole list, one tuple at a time."""
    for kind, k in stages:
        if kind == "map":
            items = [x * 3 + k for x in items]
        elif kind == "filter":
            items = [x for x in items if x % (k + 2)]
        elif kind == "flat_map":
            items = [x + j for x in items for j in range(x % (k + 1))]
        else:
            sums: dict[int, int] = {}
            out = []
            for x in items:
                sums[x % (k + 3)] = sums.get(x % (k + 3), 0) + x
                out.append(sums[x % (k + 3)])
            items = out
    return items


def build(stages: list[tuple[str, int]], items: list[int]) -> es.Flow:
    flow = es.Flow("random-chain")
    s = flow.source(es.ops.FromIterable(items), name="src")
    for i, (kind, k) in enumerate(stages):
        name = f"{kind}_{i}"
        if kind == "map":
            s = s.map(lambda x, k=k: x * 3 + k, name=name)
        elif kind == "filter":
            s = s.filter(lambda x, k=k: x % (k + 2), name=name)
        elif kind == "flat_map":
            s = s.flat_map(lambda x, k=k: [x + j for j in range(x % (k + 1))], name=name)
        else:
            s = s.key_by(lambda x, k=k: x % (k + 3)).process(lambda total, x: (total + x, [total + x]), state=int,
                                                              name=name)
    s.sink(es.ops.Collect(), name="out")
    return flow


def run(stages, items, *, threads: int, fuse: bool, batch_size: int, queue: int):
    runner = es.Runner(threads=threads, elastic=False, batch_size=batch_size, max_queue_size=queue,
                       scheduling=es.SchedulingConfig(fuse=fuse))
    handle = runner.start(build(stages, items))
    result = handle.wait(timeout=60)
    tuple_counts = {name: (op.tuples_in, op.tuples_out) for name, op in result.stats.operators.items()}
    return result.outputs["out"], tuple_counts, handle.fused


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.lists(st.tuples(st.sampled_from(STAGES), st.integers(0, 3)), min_size=1, max_size=7),
       items=st.lists(st.integers(-50, 50), max_size=120),
       threads=st.sampled_from([1, 2]), batch_size=st.sampled_from([1, 3, 16]),
       queue=st.sampled_from([2, 8, 64]))
def test_fused_runs_equal_unfused_runs_and_the_reference(stages, items, threads, batch_size, queue):
    fused_out, fused_counts, chains = run(stages, items, threads=threads, fuse=True, batch_size=batch_size,
                                          queue=queue)
    plain_out, plain_counts, none = run(stages, items, threads=threads, fuse=False, batch_size=batch_size,
                                        queue=queue)
    assert none == ()
    assert fused_out == plain_out == reference(stages, items)
    assert fused_counts == plain_counts
    # Every run of two or more consecutive stateless stages is one chain, and nothing else is.
    expected, run_ = [], []
    for i, (kind, _) in enumerate(stages + [("keyed", 0)]):
        if kind == "keyed":
            if len(run_) >= 2:
                expected.append(tuple(run_))
            run_ = []
        else:
            run_.append(f"{kind}_{i}")
    assert chains == tuple(expected)
