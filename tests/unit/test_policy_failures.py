"""A scheduling policy that raises stops the run like an operator failure: the error names the policy
and the method that raised, carries the policy's traceback, every worker ends, and no thread leaks
(the autouse ``no_leaked_threads`` fixture checks the last part).

Policies are passed as instances, not registered: a registered test policy would join the
``policy`` fixture's parameters in every other module.
"""

from __future__ import annotations

import itertools
import threading

import pytest

import elastream as es
from elastream.policies import BasePolicy
from elastream.policies.failures import PolicyError

pytestmark = pytest.mark.timeout(30)


class PickRaises(BasePolicy):
    """Raises on the first pick among several ready operators."""

    name = "boom"

    def pick(self, ready, now):
        raise ValueError("no pick today")


class QuantumRaises(BasePolicy):
    """Picks like least_recently_run; its quantum raises."""

    name = "bad_quantum"

    def pick(self, ready, now):
        return min(ready, key=lambda t: t.last_scheduled)

    def quantum(self, task, default):
        raise KeyError("no budget")


class TickRaises(QuantumRaises):
    """Picks fine, keeps the default quantum; its periodic hook raises."""

    name = "bad_tick"
    wants_ticks = True

    def quantum(self, task, default):
        return default

    def on_tick(self, stats):
        self.ticks = getattr(self, "ticks", 0) + 1
        raise RuntimeError("tick went wrong")


class PickExits(BasePolicy):
    """Raises what no policy call is guarded against (kills the worker, not just the pick)."""

    name = "exits"

    def pick(self, ready, now):
        raise SystemExit("worker killed")


def three_operators(source) -> es.Flow:
    flow = es.Flow("three")
    src = flow.add(es.ops.FromIterable(source), name="src")
    inc = flow.add(es.ops.Map(lambda x: x + 1), name="inc")
    src >> inc >> flow.add(es.ops.Collect(), name="sink")
    return flow


def run_failing(policy, source=range(1000), threads=2) -> PolicyError:
    runner = es.Runner(threads=threads, policy=policy, elastic=False,
                       scheduling=es.SchedulingConfig(stats_period_ms=20))
    with pytest.raises(es.OperatorError) as caught:
        runner.run(three_operators(source), timeout=20)
    assert not [t for t in threading.enumerate() if t.name.startswith("elastream-worker") and t.is_alive()]
    return caught.value


@pytest.mark.parametrize("threads", [1, 2])
def test_pick_that_raises_names_the_policy(threads):
    error = run_failing(PickRaises(), threads=threads)
    assert isinstance(error, PolicyError)
    assert str(error) == "scheduling policy 'boom' failed in pick: ValueError: no pick today"
    assert (error.policy, error.hook, error.operator) == ("boom", "pick", "<policy boom>")
    assert isinstance(error.cause, ValueError)
    assert 'raise ValueError("no pick today")' in error.details
    assert "in pick" in error.details
    assert "scheduler.py" not in error.details  # the traceback starts at the policy's code


def test_quantum_that_raises_names_the_policy():
    error = run_failing(QuantumRaises())
    assert isinstance(error, PolicyError)
    assert str(error) == "scheduling policy 'bad_quantum' failed in quantum: KeyError: 'no budget'"
    assert error.hook == "quantum"
    assert 'raise KeyError("no budget")' in error.details
    assert "workers.py" not in error.details


def test_on_tick_that_raises_stops_an_endless_flow():
    """The source never ends: only the policy's failure, on the monitor thread, stops the run."""
    policy = TickRaises()
    error = run_failing(policy, source=itertools.count())
    assert isinstance(error, PolicyError)
    assert str(error) == "scheduling policy 'bad_tick' failed in on_tick: RuntimeError: tick went wrong"
    assert error.hook == "on_tick"
    assert 'raise RuntimeError("tick went wrong")' in error.details
    assert "policies/failures.py" not in error.details and "periodic.py" not in error.details
    assert policy.ticks == 1  # a failed hook is not called again
    assert not [t for t in threading.enumerate() if t.name == "elastream-monitor" and t.is_alive()]


def test_the_partial_result_is_kept():
    error = run_failing(PickRaises())
    assert error.partial is not None
    assert len(error.partial.outputs.get("sink", [])) <= 1000


def test_dead_workers_report_what_killed_them():
    """Every worker died of the same failure: the run reports it, not 'every worker thread exited'."""
    with pytest.raises(es.OperatorError) as caught:
        es.Runner(threads=2, policy=PickExits(), elastic=False).run(three_operators(range(100)), timeout=20)
    assert not isinstance(caught.value, PolicyError)
    assert caught.value.operator.startswith("<worker ")
    assert isinstance(caught.value.cause, SystemExit)


def test_an_operator_failure_is_still_an_operator_error():
    flow = es.Flow("op")
    src = flow.add(es.ops.FromIterable(range(10)), name="src")
    bad = flow.add(es.ops.Map(lambda x: 1 // (x - 5)), name="bad")
    src >> bad >> flow.add(es.ops.Collect(), name="sink")
    with pytest.raises(es.OperatorError) as caught:
        es.Runner(threads=2, elastic=False).run(flow, timeout=20)
    assert not isinstance(caught.value, PolicyError)
    assert caught.value.operator == "bad"


def test_the_one_step_harness_names_a_failing_policy_too():
    from elastream.runtime.harness import SchedulerHarness

    class Boom(BasePolicy):
        name = "boom-harness"

        def pick(self, ready, now):
            raise ValueError("no pick in the harness")

    flow = es.Flow("harness")
    flow.source(range(50), name="src").map(lambda x: x, name="m").sink(es.ops.Collect(), name="out")
    with pytest.raises(PolicyError, match="scheduling policy 'boom-harness' failed in pick"):
        SchedulerHarness(flow, policy=Boom()).run()
