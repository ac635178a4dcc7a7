"""Operator kinds and their maximum degree of parallelism (ordered-multicore §1.1, §6)."""

from __future__ import annotations

import pytest

import elastream as es
from elastream.operators.base import UNBOUNDED, max_parallelism

pytestmark = pytest.mark.timeout(30)


def test_function_operators_declare_their_kind_and_bound():
    assert (es.ops.Map(abs).kind, es.ops.Map(abs).max_workers) == ("stateless", UNBOUNDED)
    assert es.ops.Filter(bool).max_workers == UNBOUNDED and es.ops.FlatMap(list).kind == "stateless"
    keyed = es.ops.KeyedProcess(lambda x: x, lambda s, x: (s, [x]), partitions=8, strategy="range")
    assert (keyed.kind, keyed.max_workers, keyed.strategy) == ("partitioned", 8, "range")
    assert es.ops.StatefulProcess(lambda s, x: (s, [x])).max_workers == 1
    assert max_parallelism("partitioned", 4) == 4 and max_parallelism("stateful") == 1


def test_fluent_key_by_carries_partitioning_and_bad_strategies_fail():
    flow = es.Flow("kinds")
    flow.source(range(10), name="src").key_by(lambda x: x % 3, partitions=3).reduce(
        lambda a, b: a + b, name="sum").collect(name="out")
    op = flow["sum"].operator
    assert (op.kind, op.partitions, op.max_workers) == ("partitioned", 3, 3)
    assert es.Runner().run(flow, timeout=30).outputs["out"][-1] == (0, 0 + 3 + 6 + 9)
    with pytest.raises(ValueError, match="strategy"):
        es.ops.KeyedReduce(lambda x: x, max, strategy="random")
    with pytest.raises(ValueError, match="partitions"):
        es.ops.KeyedProcess(lambda x: x, lambda s, x: (s, []), partitions=0)
