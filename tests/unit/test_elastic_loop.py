"""The elastic loop and the elastic Runner: decisions applied once a period, fixed levels kept, timeline kept."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

import elastream as es
from elastream.elastic.config import Elastic, elastic_from
from elastream.elastic.loop import ElasticLoop, Fixed, levels_after, moves_whole
from elastream.runtime.config import RunConfig
from elastream.runtime.decisions import MOVED_WHOLE, Applied, Levels, SetReplicas, SetThreads
from elastream.runtime.engine import start_threads


class Scripted:
    """A controller that returns the decisions given for each period, in turn."""

    name = "scripted"

    def __init__(self, *per_period):
        self.per_period = list(per_period)
        self.seen = []

    def decide(self, period, levels, machine):
        self.seen.append((period, levels))
        return self.per_period.pop(0) if self.per_period else []


def endless_flow():
    """Runs until shut down: nothing reaches the sink."""
    flow = es.Flow("endless")
    flow.source(itertools.count()).filter(lambda x: False).sink(es.ops.Collect(), name="out")
    return flow


def slow_flow(n=20_000):
    flow = es.Flow("slow")
    flow.source(range(n)).map(lambda x: x + 1).sink(es.ops.Collect(), name="out")
    return flow


def test_elastic_from_reads_the_runner_argument():
    assert elastic_from(False) is None
    assert elastic_from(True) == Elastic()
    tuned = Elastic(period_s=1.0, controller="utilization")
    assert elastic_from(tuned) is tuned
    with pytest.raises(TypeError, match="es.Elastic"):
        elastic_from("fast")
    with pytest.raises(ValueError, match="unknown elasticity controller 'fastest'"):
        Elastic(controller="fastest")


def test_levels_after_folds_in_only_what_took_effect():
    levels = Levels(threads=(1, 1))
    applied = [Applied(SetThreads(3, process=1), 0.0, True), Applied(SetThreads(2, process=0), 0.0, False, "no")]
    assert levels_after(levels, applied).threads == (1, 3)


def test_levels_after_records_a_unit_moved_whole_only_when_it_moved():
    levels = Levels(threads=(1, 1), replicas={"a": 1, "x": 1}, held=True)
    move, keyed = SetReplicas("a", 1, replicas=(1,)), SetReplicas("x", 1, replicas=(1,))
    after = levels_after(levels, [Applied(move, 0.0, True, MOVED_WHOLE), Applied(keyed, 0.0, True)])
    assert after.moved == {"a": 1} and after.working_processes == 2
    assert moves_whole(keyed, after) and not moves_whole(move, after)  # a unit moves once


def test_a_step_applies_the_decisions_and_records_the_period():
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    try:
        loop = ElasticLoop(handle, Elastic(), [Scripted([SetThreads(2, reason="more")])], Levels(threads=(1,)))
        applied = loop.step(handle.stats())
        assert [a.ok for a in applied] == [True]
        assert loop.levels.threads == (2,)
        assert handle.threads == 2
        entry = loop.timeline.entries[-1]
        assert entry.levels.threads == (2,)
        assert [a.decision.reason for a in entry.decisions] == ["more"]
        assert entry.pause_ms is not None and entry.pause_ms >= 0
    finally:
        handle.shutdown()


def test_a_fixed_thread_count_is_never_changed():
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    try:
        loop = ElasticLoop(handle, Elastic(), [Scripted([SetThreads(2)])], Levels(threads=(1,)),
                           Fixed(threads=True))
        assert loop.step(handle.stats()) == []
        assert handle.threads == 1
    finally:
        handle.shutdown()


def test_the_elastic_runner_gives_the_sequential_output_and_a_timeline():
    result = es.Runner(elastic=Elastic(period_s=0.05)).run(slow_flow(200_000), timeout=60)
    assert result.outputs["out"] == list(range(1, 200_001))
    assert result.timeline is not None
    assert not [t for t in threading.enumerate() if t.name == "elastream-elastic"]


def test_elastic_false_runs_without_a_loop_and_without_a_timeline():
    result = es.Runner(elastic=False).run(slow_flow(1000), timeout=30)
    assert result.outputs["out"] == list(range(1, 1001))
    assert result.timeline is None


def test_the_loop_thread_ends_with_a_failed_run():
    def boom(x):
        if x == 500:
            raise ZeroDivisionError("boom")
        return x

    flow = es.Flow("fails")
    flow.source(range(1000)).map(boom, name="boom").sink(es.ops.Collect(), name="out")
    with pytest.raises(es.OperatorError) as info:
        es.Runner(elastic=Elastic(period_s=0.01)).run(flow, timeout=30)
    assert info.value.operator == "boom"
    deadline = time.monotonic() + 2.0
    while any(t.name == "elastream-elastic" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name == "elastream-elastic"]


UNGUARDED = '''
import time

import elastream as es
from elastream.elastic import register_controller
from elastream.runtime.decisions import SetProcesses


class AlwaysMore:
    name = "always-more"

    def decide(self, period, levels, machine):
        return [SetProcesses(levels.processes + 1, reason="wants more")]


register_controller("always-more", AlwaysMore)
flow = es.Flow("unguarded")
flow.source(range(3000)).map(lambda x: time.sleep(0.0002) or x * 2).sink(es.ops.Collect(), name="out")
result = es.Runner(elastic=es.Elastic(controller="always-more", period_s=0.02)).run(flow)
print("periods", len(result.timeline.entries))
print("outputs ok", result.outputs["out"] == [x * 2 for x in range(3000)])
'''


def test_an_unguarded_script_runs_in_one_process_and_says_once_how_to_allow_processes(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "outputs ok True" in done.stdout
    periods = int(done.stdout.split("periods ")[1].split()[0])
    assert periods >= 3, done.stdout  # the controller asked for more processes at least twice
    assert done.stderr.count('if __name__ == "__main__":') == 1
    assert "would run faster on more processes" in done.stderr


class Broken:
    name = "broken"

    def decide(self, period, levels, machine):
        raise RuntimeError("controller bug")


def test_a_failing_controller_stops_elasticity_not_the_run(capsys):
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    try:
        loop = ElasticLoop(handle, Elastic(period_s=0.01), [Broken()], Levels(threads=(1,)))
        loop.start()
        loop._thread.join(5)
        assert isinstance(loop.error, RuntimeError) and not handle.done
    finally:
        handle.shutdown()
    assert "elasticity stopped, the flow runs on at its current levels: RuntimeError: controller bug" in (
        capsys.readouterr().err)


class SlowAnswers:
    """A handle whose parts answer late (a round trip to a busy worker) but report their own pause."""

    finished = threading.Event()

    def submit(self, decisions):
        time.sleep(0.05)  # the round trip, which no stream waited for
        return [Applied(d, 0.0, True, "", pause_ms=0.25) for d in decisions]


def test_the_pause_is_what_the_parts_measured_not_the_round_trip():
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    try:
        loop = ElasticLoop(SlowAnswers(), Elastic(), [Scripted([SetThreads(2)])], Levels(threads=(1,)))
        loop.step(handle.stats())
        assert loop.timeline.entries[-1].pause_ms == 0.25
        applied = handle.submit([SetThreads(2)])  # the threads backend measures its own reconfiguration point
        assert applied[0].ok and 0 <= applied[0].pause_ms < 50
    finally:
        handle.shutdown()


class EndedParts:
    """A handle whose parts have ended: every decision refused after a slow round trip."""

    finished = threading.Event()

    def submit(self, decisions):
        time.sleep(0.05)
        return [Applied(d, 0.0, False, "process 1 has ended") for d in decisions]


def test_refused_decisions_pause_nothing():
    """A flow ending as the period closes (IBM Fig. 10: 'process 0 has ended') once read as a 192 ms pause."""
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    try:
        loop = ElasticLoop(EndedParts(), Elastic(), [Scripted([SetThreads(2)])], Levels(threads=(1,)))
        loop.step(handle.stats())
        assert loop.timeline.entries[-1].pause_ms is None
    finally:
        handle.shutdown()


def test_a_hold_that_ended_in_the_period_is_its_pause():
    from elastream.elastic.loop import with_holds
    from elastream.metrics.period import OperatorPeriod, PeriodStats

    def op(name, hold):
        return OperatorPeriod(name=name, kind="coroutine", tuples_in=0, tuples_out=0, busy_s=0.0, cpu_s=0.0,
                              read_blocked_s=0.0, write_blocked_s=0.0, queue_length=0, write_blocked_ratio=0.0,
                              new_hold_s=hold)

    period = PeriodStats(start_s=0.0, period_s=0.5, operators={"x#split": op("x#split", 0.012), "y": op("y", 0.0)})
    assert with_holds(None, period) == pytest.approx(12.0)
    assert with_holds(30.0, period) == 30.0
    assert with_holds(None, PeriodStats(start_s=0.0, period_s=0.5)) is None


def test_the_first_period_is_the_short_first_look_and_the_rest_are_whole_periods():
    # A run starts at one process and one thread: deciding at the first whole period left a
    # bottleneck on one core that long.
    handle = start_threads(endless_flow(), RunConfig(threads=1))
    controller = Scripted()
    try:
        loop = ElasticLoop(handle, Elastic(period_s=0.3, first_period_s=0.1), [controller], Levels(threads=(1,)))
        loop.start()
        deadline = time.monotonic() + 10
        while len(controller.seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        loop.stop()
    finally:
        handle.shutdown()
    lengths = [period.period_s for period, _ in controller.seen[:3]]
    assert len(lengths) == 3
    assert 0.09 <= lengths[0] < 0.2 and all(0.29 <= s < 0.45 for s in lengths[1:])


def test_a_first_look_of_no_time_is_refused():
    with pytest.raises(ValueError, match="first_period_s"):
        Elastic(first_period_s=0)


def _spinning_flow():
    """Runs until shut down, each tuple spinning 1 ms in pure Python (the GIL held)."""
    def spin(x):
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
        return x

    flow = es.Flow("spinning")
    flow.source(itertools.count()).map(spin).filter(lambda x: False).sink(es.ops.Collect(), name="out")
    return flow


def test_a_thread_joining_beside_workers_that_hold_the_gil_pauses_no_stream():
    handle = start_threads(_spinning_flow(), RunConfig(threads=2))
    try:
        time.sleep(0.1)
        applied = handle.submit([SetThreads(3), SetThreads(1)])
        assert [a.ok for a in applied] == [True, True] and handle.threads == 1
        # The new thread's start waited for the GIL; the workers dispatched on meanwhile.
        assert [a.pause_ms for a in applied] == [0.0, 0.0]
    finally:
        handle.shutdown()
