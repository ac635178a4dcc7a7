"""Which replicas a lower count keeps in a run over several processes (processes.replica_choice): the ones in
the processes the other units load least, so units reduced to one replica spread as whole branches."""

from __future__ import annotations

from elastream.processes.replica_choice import ActiveReplicas
from elastream.runtime.decisions import SetReplicas


def _six_branches() -> ActiveReplicas:
    assignment = {"src": 0, "split": 0, "merge": 0, "sink": 1}
    for b in range(6):
        assignment |= {f"busy_{b}#0": 0, f"busy_{b}#1": 1}
    return ActiveReplicas(assignment)


def _reduce_all(active: ActiveReplicas, units: list[str]) -> dict[str, tuple[int, ...]]:
    for unit in units:
        active.settle(active.choose(SetReplicas(unit, 1)), ok=True)
    return {unit: active.active[unit] for unit in units}


def test_six_units_reduced_to_one_replica_each_run_three_in_each_process():
    active = _six_branches()
    kept = _reduce_all(active, [f"busy_{b}" for b in range(6)])
    per_process = [sum(1 for unit, (r,) in kept.items() if active.processes[unit][r] == p) for p in (0, 1)]
    assert per_process == [3, 3]


def test_the_home_process_wins_a_tie_and_a_count_of_every_replica_is_left_as_it_is():
    active = ActiveReplicas({"a#0": 1, "a#1": 0})        # home (replica 0) is process 1
    assert active.choose(SetReplicas("a", 1)).replicas == (0,)
    assert active.choose(SetReplicas("a", 2)).replicas is None


def test_a_decision_that_names_its_replicas_or_an_unknown_unit_is_passed_on_unchanged():
    active = _six_branches()
    named = SetReplicas("busy_0", 1, replicas=(1,))
    assert active.choose(named) is named
    unknown = SetReplicas("nope", 1)
    assert active.choose(unknown) is unknown


def test_decisions_of_one_period_are_chosen_in_turn_and_a_failed_one_is_undone():
    active = _six_branches()
    first, second = active.choose(SetReplicas("busy_0", 1)), active.choose(SetReplicas("busy_1", 1))
    assert (first.replicas, second.replicas) == ((0,), (1,))   # before either is settled
    active.settle(first, ok=True)
    active.settle(second, ok=False)
    assert active.active["busy_1"] == (0, 1)


def test_growing_back_makes_every_replica_active_again():
    active = _six_branches()
    _reduce_all(active, ["busy_0", "busy_1"])
    active.settle(active.choose(SetReplicas("busy_1", 2)), ok=True)
    assert active.active["busy_1"] == (0, 1)
    assert active.choose(SetReplicas("busy_2", 1)).replicas == (1,)   # busy_0 left process 1: one fewer there
