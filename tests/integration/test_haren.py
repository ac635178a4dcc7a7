"""Haren policies in real runs: one worker per operator at a time across reassignments, b tuples per
execution, no fusion, query tags, and a failing policy named in the run's error."""

from __future__ import annotations

import threading
import time

import pytest

import elastream as es
from elastream.operators.base import STATELESS
from elastream.policies.haren import BUILTIN, HarenSpec, haren_spec, policy_for, with_parameters
from elastream.policies.haren.spec import DEFAULT_BATCH


class Watched(es.FunctionOperator):
    """Records, per operator, how many workers are inside it at once and which threads ran it."""

    kind = STATELESS

    def __init__(self, log: dict, name: str):
        super().__init__(inputs=1, outputs=1)
        self.log, self.name = log, name

    def on_batch(self, items, port):
        entry = self.log[self.name]
        with entry["lock"]:
            entry["inside"] += 1
            entry["most"] = max(entry["most"], entry["inside"])
            entry["threads"].add(threading.get_ident())
            entry["batches"].append(len(items))
        time.sleep(0.0002)  # releases the GIL: another worker could enter now if the scheduler let it
        with entry["lock"]:
            entry["inside"] -= 1
        return items


def watched_flow(queries: int = 3, stages: int = 4, n: int = 1500) -> tuple[es.Flow, dict]:
    flow = es.Flow("watched")
    log: dict = {}
    for q in range(queries):
        s = flow.source(range(n), name=f"src{q}")
        for k in range(stages):
            name = f"w{q}_{k}"
            log[name] = {"lock": threading.Lock(), "inside": 0, "most": 0, "threads": set(), "batches": []}
            s = s.then(Watched(log, name), name=name)
        s.collect(name=f"out{q}")
    return flow, log


@pytest.mark.parametrize("name", BUILTIN)
def test_at_most_one_worker_runs_an_operator_also_across_reassignments(name):
    spec = with_parameters(haren_spec(name), period_s=0.002)   # a scheduling task every 2 ms
    policy = policy_for(spec, seed=3)
    flow, log = watched_flow()
    result = es.Runner(threads=4, policy=policy).run(flow, timeout=60)
    assert all(len(result.outputs[f"out{q}"]) == 1500 for q in range(3))
    assert all(entry["most"] == 1 for entry in log.values())
    stats = policy.statistics()
    assert stats.workers == 4 and stats.scheduling_tasks >= 20
    # f spreads operators at random each period: operators did move between workers.
    assert any(len(entry["threads"]) > 1 for entry in log.values())


def test_an_execution_processes_at_most_b_tuples_and_nothing_is_fused():
    flow, log = watched_flow(queries=1, stages=3, n=400)
    handle = es.Runner(threads=2, policy="haren:fcfs", batch_size=256).start(flow)
    handle.wait(30)
    assert handle.fused == ()
    batches = [b for entry in log.values() for b in entry["batches"]]
    assert sum(batches) == 3 * 400 and max(batches) <= DEFAULT_BATCH


def test_multiclass_reads_query_tags_and_components():
    flow = es.Flow("tagged")
    flow.source(range(50), name="alerts", query="alerts", priority="high").map(lambda x: x, name="score") \
        .collect(name="alarm")
    flow.source(range(50), name="fuel").map(lambda x: x, name="avg").collect(name="dash")
    handle = es.Runner(threads=2, policy="haren:multiclass").start(flow)
    result = handle.wait(30)
    assert result.outputs["alarm"] == list(range(50)) and result.outputs["dash"] == list(range(50))
    classes = {v.name: (v.query, v.priority_class) for v in handle.policy.state.views}
    assert classes["score"] == classes["alarm"] == ("alerts", "high")
    assert classes["avg"][1] == "low" and classes["avg"][0] == classes["fuel"][0] != "alerts"


def test_tagging_an_unknown_class_or_operator_is_refused_naming_it():
    flow = es.Flow("bad")
    with pytest.raises(es.FlowValidationError, match="unknown priority class 'urgent'"):
        flow.source(range(3), name="s", query="q", priority="urgent")
    with pytest.raises(es.FlowValidationError, match="no operator 'ghost'"):
        flow.tag_query("ghost", query="q")


def _broken_g(op, features):
    raise ValueError("no priority today")


def test_a_policy_whose_g_raises_fails_the_run_naming_the_policy():
    # Not registered by name: every-policy suites would pick it up.
    policy = policy_for(HarenSpec(name="test_broken_g", g=_broken_g, features=("cost",)))
    flow = es.Flow("boom")
    flow.source(range(200), name="src").map(lambda x: x, name="m").collect(name="out")
    with pytest.raises(es.OperatorError) as caught:
        es.Runner(threads=2, policy=policy).run(flow, timeout=30)
    assert str(caught.value) == "scheduling policy 'haren:test_broken_g' failed in g: ValueError: no priority today"
    assert caught.value.policy == "haren:test_broken_g" and caught.value.hook == "g"


def _cold_last(op, features):
    return (0 if op.query == "cold" else 1,)


def _endless():
    n = 0
    while True:
        yield n
        n += 1


def test_an_operator_starved_longer_than_d_is_run_anyway():
    # The hot query always has a READY operator of higher priority; the cold one runs only through d.
    spec = HarenSpec(name="test_cold_last", g=_cold_last, features=("cost",), period_s=0.01, delay_s=0.05)
    policy = policy_for(spec)
    flow = es.Flow("starving")
    flow.source(es.ops.FromGenerator(_endless), name="hot", query="hot").map(lambda x: x, name="hot_map") \
        .filter(lambda x: False, name="hot_drop").collect(name="hot_out")
    flow.source(range(100), name="cold", query="cold").collect(name="cold_out")
    handle = es.Runner(threads=1, policy=policy).start(flow)
    deadline = time.monotonic() + 10
    while handle.operator("cold_out").result() in (None, []) and time.monotonic() < deadline:
        time.sleep(0.05)
    result = handle.shutdown(timeout=10)
    assert result.outputs["cold_out"][:1] == [0]
    assert policy.statistics().delayed_runs > 0


def test_workers_added_while_running_join_the_scheduling_task():
    flow, log = watched_flow(queries=2, stages=3, n=3000)
    policy = policy_for(with_parameters(haren_spec("haren:fcfs"), period_s=0.005))
    handle = es.Runner(threads=1, policy=policy).start(flow)
    time.sleep(0.05)
    handle.set_threads(3)
    result = handle.wait(60)
    assert all(len(result.outputs[f"out{q}"]) == 3000 for q in range(2))
    assert all(entry["most"] == 1 for entry in log.values())
    assert policy.statistics().workers == 3


def test_one_policy_instance_runs_two_flows_one_after_the_other():
    policy = policy_for(haren_spec("haren:hr"))
    for n in (300, 500):
        flow = es.Flow("again")
        flow.source(range(n), name="src").map(lambda x: x + 1, name="m").collect(name="out")
        assert es.Runner(threads=2, policy=policy).run(flow, timeout=30).outputs["out"] == list(range(1, n + 1))
        assert {v.name for v in policy.state.views} == {"src", "m", "out"}
