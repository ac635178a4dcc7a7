"""Multi-process execution: same results as one process, back-pressure, failures, cleanup."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import elastream as es
from elastream.processes import WorkerProcessError

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]




def chain(n: int, maps: int = 6) -> es.Flow:
    flow = es.Flow("chain")
    s = flow.source(range(n), name="src")
    for i in range(maps):
        s = s.map(lambda x, i=i: x + i, name=f"m{i}")
    s.sink(es.ops.Collect(), name="out")
    return flow


def by_halves(flow: es.Flow) -> dict[str, int]:
    names = list(flow.operators)
    return {name: (0 if i < len(names) // 2 else 1) for i, name in enumerate(names)}


@pytest.mark.parametrize("threads", [1, 2])
def test_chain_over_two_processes_equals_one_process(threads):
    n = 20_000
    expected = es.Runner(threads=1).run(chain(n), timeout=60).outputs["out"]
    flow = chain(n)
    result = es.Runner(processes=2, threads=threads, placement=by_halves(flow)).run(flow, timeout=60)
    assert result.outputs["out"] == expected
    assert set(result.stats.operators) == set(flow.operators)
    assert result.stats.operators["out"].tuples_in == n
    assert len(result.stats.workers) == 2 * threads


def environment_probe() -> es.Flow:
    flow = es.Flow("probe")
    (flow.source(range(2), name="src")
         .map(lambda x: (os.environ.get("ES_PROBE"), os.environ.get("ES_PROBE_GONE")), name="read")
         .sink(es.ops.Collect(), name="out"))
    return flow


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_workers_see_the_environment_of_the_moment_they_start(monkeypatch, start_method):
    placement = {"src": 0, "read": 1, "out": 0}
    monkeypatch.setenv("ES_PROBE", "first")
    monkeypatch.setenv("ES_PROBE_GONE", "here")
    runner = es.Runner(processes=2, placement=placement, process_options=es.ProcessConfig(start_method=start_method))
    assert runner.run(environment_probe(), timeout=60).outputs["out"] == [("first", "here")] * 2
    # a fork server started by the first run (or earlier) must not hand its own environment on
    monkeypatch.setenv("ES_PROBE", "second")
    monkeypatch.delenv("ES_PROBE_GONE")
    assert runner.run(environment_probe(), timeout=60).outputs["out"] == [("second", None)] * 2


def test_workers_fork_from_the_fork_server_by_default():
    assert es.Runner(processes=2).config.process.start_method == "forkserver"


def test_auto_placement_and_fan_in_keep_per_stream_order():
    flow = es.Flow("diamond")
    src = flow.source(range(5_000), name="src")
    left = src.map(lambda x: ("L", x), name="left")
    right = src.map(lambda x: ("R", x), name="right")
    left.union(right, name="union").sink(es.ops.Collect(), name="out")
    result = es.Runner(processes=2, threads=1).run(flow, timeout=60)
    out = result.outputs["out"]
    assert [x for tag, x in out if tag == "L"] == list(range(5_000))
    assert [x for tag, x in out if tag == "R"] == list(range(5_000))


def test_back_pressure_bounds_ports_across_processes():
    flow = es.Flow("slow")
    src = flow.add(es.ops.FromIterable(range(3_000)), name="src")
    slow = flow.add(es.ops.Busy(cost_us=200.0), name="slow")
    out = flow.add(es.ops.Collect(), name="out")
    src >> slow >> out
    runner = es.Runner(processes=2, threads=1, max_queue_size=32, batch_size=16,
                       process_options=es.ProcessConfig(ring_bytes=64 << 10),
                       placement={"src": 0, "slow": 1, "out": 1})
    result = runner.run(flow, timeout=60)
    assert result.outputs["out"] == list(range(3_000))
    for op in result.stats.operators.values():
        for port in op.inputs:
            assert port.max_size <= 32 + port.publishers


def test_a_sending_process_runs_at_most_its_in_flight_bytes_ahead_of_the_receiving_one():
    emitted = [0]

    def numbers():
        for i in range(20_000):
            emitted[0] = i + 1
            yield i

    flow = es.Flow("ahead")
    src = flow.add(es.ops.FromIterable(numbers()), name="src")
    slow = flow.add(es.ops.Busy(cost_us=200.0), name="slow")
    src >> slow >> flow.add(es.ops.Collect(), name="out")
    runner = es.Runner(processes=2, threads=1, elastic=False, max_queue_size=64, batch_size=16,
                       process_options=es.ProcessConfig(ring_in_flight_bytes=4096),
                       placement={"src": 0, "slow": 1, "out": 1})
    handle = runner.start(flow)
    time.sleep(0.6)
    ahead = emitted[0] - handle.stats().operators["slow"].tuples_in
    result = handle.wait(60)
    assert result.outputs["out"] == list(range(20_000))
    # The 4 MiB ring takes the whole stream (over 16,000 tuples ahead by now); the bound leaves two 64-tuple
    # ports, about 4 KiB of records and what the statistics lag behind (500 tuples per 0.1 s at 200 us).
    assert ahead < 8_000, ahead


def test_operator_failure_in_a_worker_process_names_the_operator():
    def explode(x):
        if x == 500:
            raise ValueError("boom at 500")
        return x

    flow = chain(2_000)
    flow.source(range(1_000), name="other").map(explode, name="exploder").sink(es.ops.Collect(), name="out2")
    placement = {name: i % 2 for i, name in enumerate(flow.operators)}
    with pytest.raises(es.OperatorError) as info:
        es.Runner(processes=2, placement=placement).run(flow, timeout=60)
    assert info.value.operator == "exploder" or "exploder" in str(info.value)


def test_killed_worker_process_fails_the_run_within_five_seconds(wait_until):
    flow = es.Flow("endless")
    flow.source(lambda: iter(int, 1), name="src").map(lambda x: x, name="m").sink(es.ops.Collect(), name="out")
    handle = es.Runner(processes=2, placement={"src": 0, "m": 1, "out": 1}).start(flow)
    wait_until(lambda: handle.stats().operators.get("out"), timeout=30, what="process 1 reporting")
    victim = handle.worker_pids[1]
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerProcessError) as info:
        handle.wait(timeout=10)
    assert time.monotonic() - t0 < 5.0
    assert info.value.index == 1 and "out" in info.value.operators


def test_shutdown_of_an_endless_multi_process_flow(wait_until):
    flow = es.Flow("endless")
    flow.source(lambda: iter(int, 1), name="src").map(lambda x: x, name="m").sink(es.ops.Callback(lambda x: None),
                                                                                  name="out")
    handle = es.Runner(processes=2, placement={"src": 0, "m": 1, "out": 1}).start(flow)
    wait_until(lambda: handle.stats().operators.get("out") and handle.stats().operators["out"].tuples_in,
               timeout=30, what="tuples through the ring")
    t0 = time.monotonic()
    result = handle.shutdown(timeout=10)
    assert time.monotonic() - t0 < 5.0
    assert result.shutdown


def test_online_placement_from_a_previous_runs_statistics():
    def build() -> es.Flow:
        flow = es.Flow("online")
        s = flow.source(range(3_000), name="src")
        for i in range(4):
            s = s.then(es.ops.Busy(cost_us=20.0 * (i + 1)), name=f"b{i}")
        s.sink(es.ops.Collect(), name="out")
        return flow

    first = es.Runner(threads=1).run(build(), timeout=60)
    assert first.stats.operators["b0"].sent == {"b1": 3_000}
    assert first.stats.operators["b3"].cpu_s > first.stats.operators["b0"].cpu_s
    runner = es.Runner(processes=2, placement=first.stats)
    plan = runner.assignment(build())
    assert set(plan.values()) == {0, 1}
    assert runner.run(build(), timeout=60).outputs["out"] == list(range(3_000))


CTRL_C_SCRIPT = r"""
import sys
import threading
import elastream as es
from elastream.processes.forkserver import fork_server_pid

if __name__ == "__main__":  # worker processes are spawned: they re-import this file
    flowing = threading.Event()
    flow = es.Flow("endless")
    flow.source(lambda: iter(int, 1), name="src").map(lambda x: x, name="m").sink(
        es.ops.Callback(lambda x: flowing.set()), name="out")
    handle = es.Runner(processes=2, placement={"src": 0, "m": 1, "out": 0}).start(flow)
    assert flowing.wait(30), "no tuple came back through the rings"
    try:  # the signal may land as soon as the line is out, before wait() is reached
        print("pids", *handle.worker_pids, fork_server_pid(), flush=True)
        handle.wait()
    except KeyboardInterrupt:
        handle.shutdown(timeout=10)  # already done when the interrupt came inside wait()
        print("interrupted", flush=True)
        sys.exit(130)
"""


def test_ctrl_c_stops_every_process_and_unlinks_the_rings(tmp_path):
    import subprocess
    import sys

    import psutil

    script = tmp_path / "endless.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # printed once tuples have gone through both rings
    assert line.startswith("pids"), line
    pids = [int(p) for p in line.split()[1:]]  # part 0 (the script), part 1, the fork server
    helpers = [psutil.Process(p) for p in pids[1:]]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "interrupted" in out
    _, alive = psutil.wait_procs(helpers, timeout=5)  # the worker and the fork server (stopped at exit)
    assert alive == []


def test_a_ring_that_cannot_be_created_ends_the_workers_booting_meanwhile(monkeypatch):
    from elastream.ipc.ring import SharedRing
    from elastream.processes import supervisor

    real_create = SharedRing.create.__func__
    created = []

    def create_one(cls, *args, **kwargs):
        if created:
            raise OSError("no room for a second ring")
        created.append(real_create(cls, *args, **kwargs))
        return created[-1]

    spawned = []
    real_spawn = supervisor.ProcessRunHandle._spawn
    monkeypatch.setattr(SharedRing, "create", classmethod(create_one))
    monkeypatch.setattr(supervisor.ProcessRunHandle, "_spawn",
                        lambda self, specs: spawned.extend(real_spawn(self, specs)) or list(spawned))
    flow = chain(100)
    placement = {name: int(name == "m0") for name in flow.operators}  # two cut edges: two rings
    with pytest.raises(OSError, match="second ring"):
        es.Runner(processes=2, placement=placement).run(flow, timeout=30)
    assert len(created) == 1 and len(spawned) == 1
    assert not spawned[0].process.is_alive()
