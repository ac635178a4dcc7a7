"""The controller plug-in point: registry, Machine view, hot keys, decision records."""

from __future__ import annotations

import pickle

import pytest
from elastic_snapshots import chain_period, workers_period

from elastream.elastic import CONTROLLERS, Controller, Machine, create_controller, register_controller
from elastream.elastic.hotkeys import find_hot_key
from elastream.elastic.view import Unit
from elastream.runtime.decisions import Fuse, HotKey, Levels, SetProcesses, SetReplicas, SetThreads, Unfuse


@pytest.mark.parametrize("name", ["trend", "utilization", "ds2", "auto"])
def test_built_in_controllers_are_created_by_name_fresh_each_time(name):
    first, second = create_controller(name), create_controller(name)
    assert isinstance(first, Controller) and first.name == name and first is not second
    assert first.decide(chain_period({"a": 1e-4}, rate=100.0), Levels(), None) is not None   # machine None: here


def test_an_unknown_controller_is_refused_with_the_names_there_are():
    with pytest.raises(ValueError, match="unknown elasticity controller 'nope'; choose one of .*trend"):
        create_controller("nope")


def test_a_registered_controller_is_created_with_its_options():
    class Fixed:
        name = "fixed"

        def __init__(self, threads: int = 1):
            self.threads = threads

        def decide(self, period, levels, machine):
            return [SetThreads(self.threads, reason="fixed")]

    register_controller("fixed", Fixed)
    try:
        controller = create_controller("fixed", threads=3)
        assert controller.decide(workers_period(1, 1.0, 1.0, 10), Levels(), None) == [SetThreads(3, reason="fixed")]
    finally:
        CONTROLLERS.pop("fixed")


def test_auto_sizes_threads_and_replicas_over_one_period():
    controller = create_controller("auto")
    period = chain_period({"parse": 1e-5, "slow": 4e-4}, rate=2500.0, threads=2)
    decisions = controller.decide(period, Levels(threads=(1,)), Machine(cores=4, cpu_percent=30.0))
    assert {type(d) for d in decisions} == {SetThreads, SetReplicas}
    assert all(d.reason for d in decisions)


def test_the_machine_view_caps_threads_and_processes():
    machine = Machine(cores=2, cpu_percent=85.0)
    assert machine.is_cpu_busy() and machine.thread_cap == 8 and machine.process_cap == 2
    assert Machine(cores=4, max_threads=6, max_processes=3).thread_cap == 6
    assert Machine.here().cores >= 1


def test_a_hot_key_group_is_found_only_when_it_carries_most_of_the_load():
    def unit(load):
        return Unit(name="sum", members=("sum",), kind="partitioned", instances=2, tuples_in=1, tuples_out=1,
                    processed=1, busy_s=1.0, cpu_s=1.0, write_blocked_s=0.0, input_congestion=0.0,
                    output_congestion=0.0, key_group_load=load)

    hot = find_hot_key(unit((50, 900, 50)))
    assert (hot.operator, hot.group, hot.share) == ("sum", 1, 0.9)
    assert find_hot_key(unit((300, 300, 400))) is None      # spread
    assert find_hot_key(unit((9, 1))) is None               # too few tuples to tell
    assert find_hot_key(unit(())) is None                   # not keyed


def test_new_decision_records_are_frozen_picklable_and_hot_keys_are_informational():
    records = [SetProcesses(2, reason="r"), Fuse(("a", "b"), reason="r"), Unfuse(("a", "b"), reason="r"),
               HotKey("sum", 3, 0.8, reason="r")]
    for record in records:
        assert pickle.loads(pickle.dumps(record)) == record
        with pytest.raises(AttributeError):
            record.reason = "changed"  # type: ignore[misc]
    assert HotKey.informational is True
    assert not getattr(SetProcesses(2), "informational", False)
