"""Record the period snapshots the elasticity controller tests replay (run from the repository root).

    .venv/bin/python tests/data/elastic/record_snapshots.py

Writes ``chain_one_slow_unfused.json`` and ``chain_one_slow_fused.json`` (source → parse → slow
Busy → format → sink on two threads, without and with operator fusion, one statistics period of
0.5 s) and ``pure_python_4_threads.json`` (one pure-Python Busy operator on four worker threads).
Each file says how it was recorded (and the fused chains the run reported).
"""

from __future__ import annotations

import sys
from pathlib import Path

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


def record(flow: es.Flow, threads: int, path: Path, fuse: bool = True, **about: object) -> None:
    periods = []
    scheduling = es.SchedulingConfig(stats_period_ms=500.0, fuse=fuse)
    handle = es.Runner(threads=threads, elastic=False, scheduling=scheduling).start(flow)
    handle.add_period_listener(periods.append)
    handle.wait(120)
    fused = [list(chain) for chain in getattr(handle, "fused", ())]
    save_periods(periods, path, threads=threads, period_ms=500, fused=fused, **about)
    print(f"{path.name}: {len(periods)} periods, fused {fused}")


if __name__ == "__main__":
    shape = "src -> parse (map) -> slow (Busy 200 us) -> fmt (map) -> out"
    record(chain_one_slow(8_000), 2, HERE / "chain_one_slow_unfused.json", fuse=False, shape=shape, tuples=8_000)
    record(chain_one_slow(8_000), 2, HERE / "chain_one_slow_fused.json", shape=shape, tuples=8_000)
    record(pure_python(8_000), 4, HERE / "pure_python_4_threads.json",
           shape="src -> work (Busy 100 us, holds the GIL) -> out", tuples=8_000)
