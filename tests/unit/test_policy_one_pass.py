"""The one-pass picks of qst, lp, et and ct choose what their former sort / filter-then-max / min
definitions chose (kept here as references), on random ready sets of fake operator views."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

import elastream as es
from elastream.metrics.period import OperatorPeriod, PeriodStats
from elastream.policies import ct as ct_module
from elastream.policies import et as et_module
from elastream.runtime.ready import new_ready_set, next_stamp

pytestmark = pytest.mark.timeout(30)

NOW = 100.0


@dataclass(eq=False)
class View:
    name: str
    position: int
    index: int
    queued: int = 0
    out_queued: int = 0
    cost_per_tuple: float = 0.0
    busy_s: float = 0.0
    workers: int = 0
    max_workers: int = 1
    last_scheduled: float = NOW - 0.01
    is_source: bool = False
    upstream: list = field(default_factory=list)
    downstream: list = field(default_factory=list)

    def output_queued(self) -> int:
        return self.out_queued


def random_views(rng: random.Random, n: int) -> list[View]:
    views = [View(f"op{i}", position=rng.randint(0, n // 2), index=i, queued=rng.choice([0, 0, 1, 50, 900]),
                  out_queued=rng.choice([0, 10, 500, 3000, 5000]), cost_per_tuple=rng.choice([0.0, 1e-5, 1e-3]),
                  busy_s=rng.uniform(0, 2), workers=rng.randint(0, 2), max_workers=rng.randint(1, 2),
                  last_scheduled=NOW - rng.choice([0.0, 0.01, 0.1]))
             for i in range(n)]
    rng.shuffle(views)
    return views


def snapshot(views: list[View], rng: random.Random) -> PeriodStats:
    ops = {v.name: OperatorPeriod(name=v.name, kind="stateless", tuples_in=100,
                                  tuples_out=rng.choice([10, 100, 200]), busy_s=0.1, cpu_s=0.1,
                                  read_blocked_s=0.0, write_blocked_s=0.0, queue_length=0, write_blocked_ratio=0.0,
                                  sent={}) for v in views}
    return PeriodStats(start_s=0.0, period_s=0.1, operators=ops)


def qst_by_sorting(policy, ready):
    total = policy._cs_total or float(len(ready))
    ordered = sorted(ready, key=lambda t: (t.position, t.index))
    for t in ordered:
        if t.output_queued() < policy.capacity * policy._cs.get(t.name, 1.0) / total:
            return t
    return ordered[0]


def lp_by_filtering(ready):
    with_input = [t for t in ready if t.queued > 0]
    return max(with_input or ready, key=lambda t: (t.position, t.index))


def et_by_priority(ready):
    best, top = None, 0.0
    for t in ready:
        p = et_module.priority(t)
        if p > top:
            best, top = t, p
    return best if best is not None else min(ready, key=lambda t: t.last_scheduled)


def ct_by_min(policy, ready):
    return min(ready, key=lambda t: policy.effective_tuples(t, policy._cs.get(t.name, 1.0)))


def scheduler_ready_set(policy, views) -> dict:
    """The views as a scheduler's ready set, followed by the policy's index (runtime.ready)."""
    ready = new_ready_set(policy)
    for v in views:
        ready[v] = next_stamp()
    return ready


@pytest.mark.parametrize("via", ["a collection", "the scheduler's index"])
@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("name", ["qst", "lp", "et", "ct"])
def test_one_pass_pick_equals_the_former_definition(name, seed, via):
    rng = random.Random(seed)
    views = random_views(rng, rng.randint(2, 60))
    policy = es.policies.create(name, seed=0)
    if seed % 2:  # half the cases with a period's cumulative selectivities, half before the first period
        policy.on_tick(snapshot(views, rng))
    ready = dict.fromkeys(views).keys() if via == "a collection" else scheduler_ready_set(policy, views)
    if name == "ct":
        policy.pick(ready, NOW)  # opens the window on these views
        for v in views:
            v.busy_s += rng.choice([0.0, 0.05, 0.3])
        policy.period += 1  # indexed keys are re-read once a period (busy time does not grow while READY)
    expected = {"qst": lambda: qst_by_sorting(policy, ready), "lp": lambda: lp_by_filtering(ready),
                "et": lambda: et_by_priority(ready), "ct": lambda: ct_by_min(policy, ready)}[name]()
    assert policy.pick(ready, NOW) is expected


def test_ct_keeps_its_documented_equation():
    v = View("a", 0, 0, cost_per_tuple=1e-3, busy_s=1.0, workers=1)
    policy = es.policies.create("ct", seed=0)
    policy.pick([v], NOW)
    v.busy_s = 1.5
    assert policy.effective_tuples(v, 0.5) == pytest.approx((0.5 + ct_module.TIME_SLICE_S) / (1e-3 * 0.5))
