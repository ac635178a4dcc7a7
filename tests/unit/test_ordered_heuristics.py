"""The ordered-multicore §6 heuristics pick what their equations say (fake operator features)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import elastream as es
from elastream.metrics.period import OperatorPeriod, PeriodStats
from elastream.policies.features import cumulative_selectivities

pytestmark = pytest.mark.timeout(30)

NOW = 100.0


@dataclass(eq=False)
class Fake:
    name: str
    position: int
    queued: int = 0
    cost_per_tuple: float = 1e-4
    selectivity: float = 1.0
    out_queued: int = 0
    workers: int = 0
    max_workers: int = 1
    busy_s: float = 0.0
    last_scheduled: float = NOW - 0.01
    is_source: bool = False
    index: int = 0
    upstream: list = field(default_factory=list)
    downstream: list = field(default_factory=list)

    def output_queued(self) -> int:
        return self.out_queued


def pipeline(*stages: Fake) -> list[Fake]:
    for i, (a, b) in enumerate(zip(stages, stages[1:])):
        a.downstream.append(b)
        b.upstream.append(a)
    for i, s in enumerate(stages):
        s.index = i
    return list(stages)


def policy(name: str, *stages: Fake):
    """The policy, told the stages' cumulative selectivities as one period's snapshot would (``sent`` edges)."""
    p = es.policies.create(name, seed=0)
    if stages:
        p.on_tick(period_of(stages))
    return p


def period_of(stages) -> PeriodStats:
    ops = {}
    for s in stages:
        n_in = 1000
        ops[s.name] = OperatorPeriod(name=s.name, kind="stateless", tuples_in=n_in,
                                     tuples_out=round(n_in * s.selectivity), busy_s=0.1, cpu_s=0.1,
                                     read_blocked_s=0.0, write_blocked_s=0.0, queue_length=s.queued,
                                     write_blocked_ratio=0.0, sent={d.name: 1 for d in s.downstream})
    return PeriodStats(start_s=0.0, period_s=0.1, operators=ops)


def test_lp_picks_the_latest_operator_with_input():
    a, b, c = pipeline(Fake("a", 0, is_source=True), Fake("b", 1, queued=5), Fake("c", 2, queued=0))
    assert policy("lp").pick([a, b, c], NOW) is b
    c.queued = 1
    assert policy("lp").pick([a, b, c], NOW) is c


def test_qst_picks_the_earliest_operator_under_its_threshold():
    # Equal selectivities: every threshold is C/3; the source's output queue is full.
    cap = policy("qst").capacity
    a, b, c = pipeline(Fake("a", 0, is_source=True, out_queued=cap), Fake("b", 1, queued=9, out_queued=0),
                       Fake("c", 2, queued=3))
    assert policy("qst", a, b, c).pick([a, b, c], NOW) is b
    a.out_queued = 0
    assert policy("qst", a, b, c).pick([a, b, c], NOW) is a


def test_qst_thresholds_follow_cumulative_selectivity():
    cap = policy("qst").capacity
    # b filters 90 %: cs = [1, 0.1, 0.1]; a's threshold is C/1.2, b's C*0.1/1.2.
    a, b, c = pipeline(Fake("a", 0, is_source=True, out_queued=int(cap / 1.2) + 1),
                       Fake("b", 1, queued=1, selectivity=0.1, out_queued=int(cap * 0.1 / 1.2) - 1), Fake("c", 2))
    assert policy("qst", a, b, c).pick([a, b, c], NOW) is b


def test_cumulative_selectivity_comes_from_the_period_traffic():
    a, b, c = pipeline(Fake("a", 0, is_source=True), Fake("b", 1, selectivity=0.1), Fake("c", 2, selectivity=0.5))
    cs = cumulative_selectivities(period_of([a, b, c]))
    assert cs == pytest.approx({"a": 1.0, "b": 0.1, "c": 0.05})


def test_et_prefers_the_largest_queued_work_per_worker():
    a, b, c = pipeline(Fake("a", 0, is_source=True), Fake("b", 1, queued=100, cost_per_tuple=1e-4),
                       Fake("c", 2, queued=30, cost_per_tuple=1e-3))
    assert policy("et").pick([a, b, c], NOW) is c  # 30 ms of work beats 10 ms
    c.workers, c.max_workers = 1, 4
    assert policy("et").pick([a, b, c], NOW) is c  # 15 ms for the next worker still wins
    c.workers = c.max_workers
    assert policy("et").pick([a, b, c], NOW) is b  # at its maximum degree: priority 0


def test_ct_picks_the_lowest_effective_throughput():
    a, b, c = pipeline(Fake("a", 0, is_source=True, cost_per_tuple=1e-5), Fake("b", 1, queued=1),
                       Fake("c", 2, queued=1))
    p = policy("ct", a, b, c)
    p.pick([a, b, c], NOW)  # opens the window
    a.busy_s, b.busy_s, c.busy_s = 0.01, 0.5, 0.02
    assert p.pick([a, b, c], NOW) is c


def test_aging_picks_a_starving_operator_first():
    a, b, c = pipeline(Fake("a", 0, is_source=True, last_scheduled=NOW - 5), Fake("b", 1, queued=5),
                       Fake("c", 2, queued=5))
    for name in ("lp", "qst", "et", "ct"):
        assert policy(name).pick([a, b, c], NOW) is a, name
