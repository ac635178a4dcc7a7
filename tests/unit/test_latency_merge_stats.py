"""Merging the parts' statistics copies nothing it does not change (issue 20: the elastic loop merges
them twice a second while holding the GIL part 0's worker needs)."""

from __future__ import annotations

import dataclasses

from elastream.metrics.stats import FlowStats, OperatorStats, WorkerStats
from elastream.processes.merge_stats import merge_stats
from elastream.processes.spec import PROXY_PREFIX

SENDER = PROXY_PREFIX + "send_0"  # as the run names a ring sender


def op(name: str, sent: dict[str, int] | None = None, tuples: int = 0) -> OperatorStats:
    return OperatorStats(
        name=name, kind="stateless", state="running", activations=1, busy_s=0.0, read_blocked_s=0.0,
        write_blocked_s=0.0, tuples_in=tuples, tuples_out=tuples, last_scheduled=0.0, read_rate=0.0,
        write_rate=0.0, conjunctive_wait_fraction=0.0, disjunctive_wait_fraction=0.0,
        output_write_blocked_ratio=0.0, sent=sent or {})


def worker(index: int) -> WorkerStats:
    return WorkerStats(index=index, alive=True, busy_s=0.0, idle_s=0.0, alive_s=1.0, dispatches=0, utilisation=0.0)


def part(*ops: OperatorStats, workers: int = 1) -> FlowStats:
    return FlowStats(elapsed_s=1.0, threads=workers, policy="p", operators={o.name: o for o in ops},
                     workers=tuple(worker(i) for i in range(workers)))


def test_an_operator_that_sent_into_no_ring_is_passed_on_as_it_is():
    parse = op("parse", sent={"count": 5})
    merged = merge_stats([part(parse)], 1.0, 1, ["parse"], {SENDER: "count#1"})
    assert merged.operators["parse"] is parse


def test_what_an_operator_sent_into_a_ring_is_credited_to_the_operator_behind_it():
    split = op("count#split", sent={"count#0": 3, SENDER: 4})
    merged = merge_stats([part(split)], 1.0, 1, ["count#split"], {SENDER: "count#1"})
    assert merged.operators["count#split"].sent == {"count#0": 3, "count#1": 4}
    assert split.sent == {"count#0": 3, SENDER: 4}, "the part's snapshot is left as it was"


def test_workers_are_numbered_across_the_parts_and_proxies_are_left_out():
    merged = merge_stats([part(op("a"), workers=2), None, part(op(SENDER), op("a", tuples=2), workers=1)],
                         1.0, 3, ["a"], {})
    assert [w.index for w in merged.workers] == [0, 1, 2]
    assert list(merged.operators) == ["a"] and merged.operators["a"].tuples_in == 2
    first = part(op("a"), workers=2)
    assert merge_stats([first], 1.0, 2, ["a"], {}).workers[1] is first.workers[1]
    assert dataclasses.replace(first.workers[0]) == merge_stats([first], 1.0, 2, ["a"], {}).workers[0]
