"""Haren's scheduling and execution tasks on fixed snapshots: U and D, f's lists, the delay d, Algorithm 1's scan."""

from __future__ import annotations

import threading

from haren_fakes import FakeTask, chain_of

from elastream.policies.haren import Feature, HarenSpec, register_feature
from elastream.policies.haren.execution_task import delayed, pick
from elastream.policies.haren.scheduling_task import sequential_part, update_dependent, update_executed
from elastream.policies.haren.state import HarenState, WorkerSlot
from elastream.runtime.states import OperatorState

RECOMPUTED: list[int] = []


def _counted(op, old, now):
    RECOMPUTED.append(op.index)
    return float(op.index)


COUNTED = register_feature(Feature("test_counted_dependent", _counted, dependent=True, spreads_to="downstream",
                                   execution_intrinsic=False))


class FakeSched:
    """What the scheduling task reads of the scheduler."""

    def __init__(self, tasks):
        self.tasks = tasks
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.failures: list = []

    def now(self) -> float:
        return 100.0

    def internal_error(self, where, failed, held) -> None:
        self.failures.append((where, failed))


class FakePolicy:
    failed = None

    def fail(self, sched, hook, error):
        self.failed = hook


def state_over(tasks, features=("test_counted_dependent",), g=lambda op, F: (0,), members=(0,), f=None, **kw):
    spec = HarenSpec(name="test", g=g, features=tuple(features), **({"f": f} if f else {}), **kw)
    return HarenState(spec, tasks, None, set(members), now=0.0, seed=1)


def test_dependency_rows_hold_the_operator_and_its_subscribers():
    state = state_over(chain_of("src", "a", "b"))
    assert state.depends == ((0, 1), (1, 2), (2,))


def test_dependent_features_are_recomputed_exactly_for_the_operators_marked_in_u():
    two_queries = chain_of("s1", "a1", "k1") + chain_of("s2", "a2", "k2")
    state = state_over(two_queries)
    update_dependent(state, now=1.0)        # the first pass computes every operator once
    RECOMPUTED.clear()
    slot = WorkerSlot(0, now=1.0, period_s=0.1, first_backoff_s=0.001)
    slot.executed = {1, 3}                  # a1 and s2 ran in the last execution task
    update_executed(state, slot, now=1.0)
    marked = {i for i, m in enumerate(state.update_marks) if m}
    assert marked == {1, 2, 3, 4}           # themselves and their subscribers (D)
    update_dependent(state, now=1.0)
    assert sorted(RECOMPUTED) == [1, 2, 3, 4]
    assert not any(state.update_marks) and slot.executed == set()


def test_t_star_puts_every_live_operator_on_exactly_one_list():
    tasks = chain_of("src", "a", "b", "c", "sink")
    tasks[4].state = OperatorState.COMPLETED
    state = state_over(tasks, members=(0, 1, 2))
    sched = FakeSched(tasks)
    slot = WorkerSlot(0, now=0.0, period_s=0.1, first_backoff_s=0.001)
    for _ in range(5):                       # f is random: several reassignments
        sequential_part(FakePolicy(), state, slot, sched)
        listed = [v.name for views in state.lists.values() for v in views]
        assert sorted(listed) == ["a", "b", "c", "src"]   # the completed sink is on none
        assert set(state.lists) == {0, 1, 2}
        assert {state.owner[v.index] for v in state.views[:4]} <= {0, 1, 2}


def test_a_failing_f_is_reported_once_and_the_lists_still_cover_every_operator():
    def broken(op, F, workers, rng):
        raise ValueError("no worker for you")

    tasks = chain_of("src", "a", "sink")
    state = state_over(tasks, f=broken, members=(0, 1))
    policy, sched = FakePolicy(), FakeSched(tasks)
    sequential_part(policy, state, WorkerSlot(0, 0.0, 0.1, 0.001), sched)
    assert policy.failed == "f"
    assert sorted(v.name for views in state.lists.values() for v in views) == ["a", "sink", "src"]


def test_an_operator_not_run_for_longer_than_d_is_run_first_even_at_the_lowest_priority():
    tasks = chain_of("src", "a", "b")
    state = state_over(tasks, features=("cost",), delay_s=0.5)   # cost is execution-intrinsic
    slot = WorkerSlot(0, now=0.0, period_s=0.1, first_backoff_s=0.001)
    slot.order, slot.prios = list(state.views), [(3,), (2,), (1,)]
    state.last_run[:] = [9.9, 9.8, 9.0]                           # b last ran 1 s before now = 10
    slot.due = delayed(state, slot, now=10.0)
    assert [v.name for v in slot.due] == ["b"]
    ready = {t: 0 for t in tasks}
    assert pick(state, slot, ready, set()).name == "b"            # the starved one, though lowest
    assert pick(state, slot, ready, set()).name == "src"          # then the list from its top
    assert slot.delayed_runs == 1


def test_no_operator_is_delayed_when_the_policy_reads_no_execution_intrinsic_feature():
    tasks = chain_of("src", "a")
    state = state_over(tasks)                                      # only a non-intrinsic dependent feature
    slot = WorkerSlot(0, now=0.0, period_s=0.1, first_backoff_s=0.001)
    slot.order, slot.prios = list(state.views), [(1,), (1,)]
    state.last_run[:] = [0.0, 0.0]
    assert delayed(state, slot, now=100.0) == []


def test_the_scan_continues_down_equal_priorities_then_restarts_from_the_top():
    tasks = [FakeTask(n) for n in ("x", "y", "z", "w")]
    state = state_over(tasks)
    slot = WorkerSlot(0, now=0.0, period_s=0.1, first_backoff_s=0.001)
    slot.order, slot.prios = list(state.views), [(2,), (2,), (2,), (1,)]
    ready = {t: 0 for t in tasks}
    picks = [pick(state, slot, ready, set()).name for _ in range(4)]
    assert picks == ["x", "y", "z", "x"]    # round the equal-priority head, never down to w while x can run
    del ready[tasks[0]], ready[tasks[1]], ready[tasks[2]]
    assert pick(state, slot, ready, set()).name == "w"
    assert pick(state, slot, {}, set()) is None
