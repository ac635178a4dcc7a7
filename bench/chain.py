"""``elastream bench chain``: a fixed-size job of the 12 × 100 µs pure-Python chain, as a user runs it.

The issue's data-parallel case: ``source → 12 maps, each spending 100 µs of
pure Python per tuple → Collect``, a job of ``--tuples`` tuples. The plain
loop calls the 12 functions on every tuple in one core; the 2-core ideal is
half its time. Rows, each run ``--repeat`` times interleaved and checked
against the plain loop's output:

* ``Runner()`` — plain, elastic: one process at first, a worker process held
  ready; DS2 adds the fused chain's replica there when it falls behind;
* ``Runner(processes=2)`` — the fused chain replicated once per process;
* ``Runner(processes=2, elastic=False)`` — the static placement (pipeline halves).

Each row reports its median seconds and its share of the 2-core ideal
(goal ≥ 0.95). The fork helper is started before the rows (once per program:
the first multi-process run of a program pays it). GIL case: hold — only
processes add CPU.

Example::

    elastream bench chain --tuples 3000 30000 --repeat 3 --json
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import elastream as es
from elastream.bench._common import fmt, machine
from elastream.ops.busy import spin

GIL_NOTE = "GIL case: hold — each map spins in pure Python; only worker processes add CPU (one core each)."

#: Row label → how the user writes the runner.
RUNNERS = {
    "Runner()": lambda: es.Runner(),
    "Runner(processes=2)": lambda: es.Runner(processes=2),
    "Runner(processes=2, elastic=False)": lambda: es.Runner(processes=2, elastic=False),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench chain``."""
    parser.add_argument("--tuples", type=int, nargs="+", default=[3_000, 30_000], help="job sizes")
    parser.add_argument("--ops", type=int, default=12, help="maps in the chain")
    parser.add_argument("--cost-us", type=float, default=100.0, help="pure-Python work per map and tuple (µs)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (medians reported)")


def make_step(cost_s: float):
    """One map of the chain: ``cost_s`` of pure Python, then the tuple unchanged."""
    def step(x: int) -> int:
        spin(cost_s)
        return x
    return step


def build_chain(n: int, ops: int, cost_s: float) -> es.Flow:
    """``range(n)`` → ``ops`` maps of ``cost_s`` each → Collect "out"."""
    flow = es.Flow("chain")
    stream = flow.source(range(n), name="src")
    for i in range(ops):
        stream = stream.map(make_step(cost_s), name=f"m{i}")
    stream.sink(es.ops.Collect(), name="out")
    return flow


def plain_loop(n: int, ops: int, cost_s: float) -> list[int]:
    """The reference: the same functions called on every tuple in one loop, on one core."""
    steps = [make_step(cost_s) for _ in range(ops)]
    out = []
    for x in range(n):
        for step in steps:
            x = step(x)
        out.append(x)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every job size: the plain loop and each runner, interleaved ``--repeat`` times."""
    cost_s = args.cost_us / 1e6
    t0 = time.perf_counter()
    es.Runner(processes=2).run(build_chain(10, 1, 0.0))  # the fork helper starts once per program, not per row
    warm_up_s = time.perf_counter() - t0
    jobs = []
    for n in args.tuples:
        times: dict[str, list[float]] = {"plain loop": [], **{label: [] for label in RUNNERS}}
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            expected = plain_loop(n, args.ops, cost_s)
            times["plain loop"].append(time.perf_counter() - t0)
            for label, make in RUNNERS.items():
                t0 = time.perf_counter()
                outputs = make().run(build_chain(n, args.ops, cost_s), timeout=3600).outputs["out"]
                times[label].append(time.perf_counter() - t0)
                if outputs != expected:
                    raise AssertionError(f"{label} gave other outputs than the plain loop")
        ideal = statistics.median(times["plain loop"]) / 2
        rows = [{"config": label, "seconds": statistics.median(ts), "runs": ts,
                 "share_of_2core_ideal": ideal / statistics.median(ts) if label != "plain loop" else None}
                for label, ts in times.items()]
        jobs.append({"tuples": n, "ideal_s": ideal, "rows": rows})
    return {"benchmark": "chain", "ops": args.ops, "cost_us": args.cost_us, "repeat": args.repeat,
            "note": GIL_NOTE, "fork_helper_start_s": warm_up_s, "jobs": jobs, "machine": machine()}


def print_report(result: dict[str, Any], console: Console) -> None:
    """One table per job size: each runner's median time and its share of the 2-core ideal."""
    for job in result["jobs"]:
        table = Table(title=f"{result['ops']} × {result['cost_us']:.0f} µs pure-Python chain, "
                            f"{job['tuples']:,} tuples (2-core ideal {job['ideal_s']:.2f} s)")
        for col in ("configuration", "median s", "share of 2-core ideal"):
            table.add_column(col, justify="right")
        for row in job["rows"]:
            table.add_row(row["config"], f"{row['seconds']:.2f}", fmt(row["share_of_2core_ideal"], 2))
        console.print(table)
    console.print(f"the fork helper's one-time start (a first multi-process run of the program): "
                  f"{result['fork_helper_start_s']:.2f} s, not in the rows")
    console.print(result["note"])

