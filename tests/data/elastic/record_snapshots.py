"""Record the period snapshots the elasticity controller tests replay (run from the repository root).

    .venv/bin/python tests/data/elastic/record_snapshots.py

Writes ``chain_one_slow_unfused.json`` and ``chain_one_slow_fused.json`` (source → parse → slow
Busy → format → sink on two threads, without and with operator fusion, one statistics period of
0.5 s), ``pure_python_4_threads.json`` (one pure-Python Busy operator on four worker threads) and
``pure_python_pipeline_4_threads.json`` (four pure-Python Busy operators, unfused, on four worker
threads: several threads busy, the GIL lets one run). Each file says how it was recorded, the fused
chains the run reported and the machine's CPU percent over each period (psutil).
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

import elastream as es
from elastream.ops.busy import Busy

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "unit" / "elastic"))

from elastic_snapshots import save_periods  # noqa: E402


def chain_one_slow(n: int) -> es.Flow:
    flow = es.Flow("chain_one_slow")
    stream = flow.source(range(n), name="src").map(lambda x: x + 1, name="parse")
    stream = stream.then(Busy(cost_us=200.0), name="slow").map(lambda x: x, name="fmt")
    stream.collect(name="out")
    return flow


def pure_python(n: int) -> es.Flow:
    flow = es.Flow("pure_python")
    flow.source(range(n), name="src").then(Busy(cost_us=100.0), name="work").collect(name="out")
    return flow


def pure_python_pipeline(n: int) -> es.Flow:
    flow = es.Flow("pure_python_pipeline")
    stream = flow.source(range(n), name="src")
    for i in range(4):
        stream = stream.then(Busy(cost_us=100.0), name=f"busy{i}")
    stream.collect(name="out")
    return flow


def record(flow: es.Flow, threads: int, path: Path, fuse: bool = True, **about: object) -> None:
    periods, cpu = [], []
    scheduling = es.SchedulingConfig(stats_period_ms=500.0, fuse=fuse)
    psutil.cpu_percent(interval=None)
    handle = es.Runner(threads=threads, elastic=False, scheduling=scheduling).start(flow)
    handle.add_period_listener(lambda period: (periods.append(period), cpu.append(psutil.cpu_percent(interval=None))))
    handle.wait(120)
    fused = [list(chain) for chain in getattr(handle, "fused", ())]
    save_periods(periods, path, threads=threads, period_ms=500, fused=fused, machine_cpu_percent=cpu, **about)
    print(f"{path.name}: {len(periods)} periods, fused {fused}")


if __name__ == "__main__":
    shape = "src -> parse (map) -> slow (Busy 200 us) -> fmt (map) -> out"
    record(chain_one_slow(8_000), 2, HERE / "chain_one_slow_unfused.json", fuse=False, shape=shape, tuples=8_000)
    record(chain_one_slow(8_000), 2, HERE / "chain_one_slow_fused.json", shape=shape, tuples=8_000)
    record(pure_python(8_000), 4, HERE / "pure_python_4_threads.json",
           shape="src -> work (Busy 100 us, holds the GIL) -> out", tuples=8_000)
    record(pure_python_pipeline(6_000), 4, HERE / "pure_python_pipeline_4_threads.json", fuse=False,
           shape="src -> busy0 .. busy3 (Busy 100 us each, hold the GIL) -> out", tuples=6_000)
