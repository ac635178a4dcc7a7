"""``Runner(replicas=...)``: operators run as ordered split → replicas → merge (C-Stream §4.2)."""

from __future__ import annotations

import pytest

import elastream as es
from flow_deadline import run_with_deadline


def running_sums() -> es.Flow:
    flow = es.Flow("replicas")
    (flow.source(es.ops.FromIterable([(i % 13, i) for i in range(3000)]), name="src")
         .key_by(lambda e: e[0], partitions=4).reduce(lambda a, e: (e[0], a[1] + e[1]), )
         .collect(name="out"))
    return flow


def sum_operator(flow: es.Flow) -> str:
    return next(name for name in flow.operators if name.startswith("keyedreduce"))


@pytest.mark.parametrize("processes", [1, 2])
def test_replicas_option_keeps_the_sequential_output(processes):
    expected = run_with_deadline(running_sums(), threads=1).outputs["out"]
    flow = running_sums()
    name = sum_operator(flow)
    result = run_with_deadline(flow, timeout=60, processes=processes, threads=1, replicas={name: 2})
    assert result.outputs["out"] == expected
    assert {f"{name}#0", f"{name}#1", f"{name}#merge"} <= set(result.stats.operators)


def test_replicas_option_is_validated():
    with pytest.raises(ValueError, match="replicas"):
        es.Runner(replicas=3)
