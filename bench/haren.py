"""``elastream bench haren``: Haren's evaluation (§7) — policies vs OS scheduling, T_S overhead, Multi-class.

Scenarios (``--scenarios``, default all but ``delays``):

* ``synthetic`` (Fig. 4): 5–20 §7.1 queries (chains of L = 12 Busy operators; query selectivity
  uniform in [0.01, 1], cost B·2^z ± 10 %) under OS scheduling (``Runner(model="dedicated")``: a
  thread per operator) and Haren's FCFS, HR and Chain on ``--threads`` workers: ingress throughput,
  mean and max latency, queued tuples, memory, cores used;
* ``overhead`` (Figs. 5–7): the scheduling task's time — priority (g), sort, update, coordination
  (both barriers and t*'s sequential part), total — as a fraction of the workers' time, per policy,
  number of queries and period P (the ``synthetic`` runs give P = 100 ms; this adds ``--periods``);
* ``multiclass1`` (Fig. 8): 3 HIGH and 10 LOW queries at steady rates, Multi-class vs OS;
* ``multiclass2`` (Fig. 9): HIGH sources bursting (``--burst`` on/off seconds) over a constant LOW
  load, Multi-class vs OS: HIGH max latency, its series over the run, LOW mean latency;
* ``delays``: scenario 2 under Multi-class at several delays d (how the default d was chosen).

Scaled to 2 cores and Python: rates in tuples per second are a few hundred, not thousands; the
Busy operators release the GIL (``gil="release"``: they hash buffers), so two workers can run two
operators at once; runs last seconds, not minutes. ``--quick`` shortens everything for CI-size runs.
The JSON result and a PNG go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.bench._common import fmt, machine
from elastream.bench._haren_runs import flatness, measure
from elastream.bench._haren_workload import QuerySpec, draw_query

SCENARIOS = ("synthetic", "overhead", "multiclass1", "multiclass2", "delays")
DEFAULT_SCENARIOS = SCENARIOS[:4]
GIL_NOTE = ("GIL released: the Busy operators hash buffers without the GIL (gil='release'), so the workers "
            "(and the OS baseline's threads) can run two operators at once on the 2 cores.")
OS_NOTE = ("OS = Runner(model='dedicated'): one thread per operator, scheduled by the operating system, with "
           "the same batch size b as the Haren runs.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench haren``."""
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(DEFAULT_SCENARIOS))
    parser.add_argument("--queries", type=int, nargs="+", default=None, help="query counts (default 5 10 15 20)")
    parser.add_argument("--configs", nargs="+", default=["os", "fcfs", "hr", "chain"],
                        help="synthetic: 'os' and Haren policy names")
    parser.add_argument("--periods", type=float, nargs="+", default=[0.1, 0.25], help="overhead: periods P (s)")
    parser.add_argument("--seconds", type=float, default=None, help="synthetic / overhead run length (default 10)")
    parser.add_argument("--base-cost-us", type=float, default=5.0, help="B: the base cost per tuple (µs)")
    parser.add_argument("--rate", type=float, default=100.0, help="synthetic: tuples/s per query source")
    parser.add_argument("--high-rate", type=float, default=30.0, help="multiclass1: HIGH tuples/s per source")
    parser.add_argument("--low-rate", type=float, default=100.0, help="multiclass: LOW tuples/s per source")
    parser.add_argument("--burst-rate", type=float, default=250.0, help="multiclass2: HIGH tuples/s while on")
    parser.add_argument("--burst", type=float, nargs=2, default=None, metavar=("ON", "OFF"),
                        help="multiclass2: seconds on and off (default 5 15; --quick 1.25 3.75)")
    parser.add_argument("--mc-seconds", type=float, default=None,
                        help="multiclass run length (default 20 steady, 60 bursting; --quick 6 and 10)")
    parser.add_argument("--delays", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0], help="delays: d (s)")
    parser.add_argument("--threads", type=int, default=2, help="Haren's processing threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="5 and 20 queries, short runs (CI size)")
    parser.add_argument("--out", default="bench/results/haren", help="directory of the JSON and PNG ('' for none)")


def synthetic_queries(n: int, args: argparse.Namespace) -> list[QuerySpec]:
    """The first ``n`` queries of the seeded §7.1 draw (the same queries at every count)."""
    rng = random.Random(args.seed)
    return [draw_query(f"q{i}", rng, args.base_cost_us, args.rate) for i in range(n)]


def multiclass_queries(args: argparse.Namespace, bursting: bool) -> list[QuerySpec]:
    """3 HIGH and 10 LOW queries (§7.4); HIGH bursts in scenario 2."""
    rng = random.Random(args.seed + 100)
    burst = tuple(args.burst) if args.burst else ((1.25, 3.75) if args.quick else (5.0, 15.0))
    high_rate = args.burst_rate if bursting else args.high_rate
    high = [draw_query(f"high{i}", rng, args.base_cost_us, high_rate, "high", burst if bursting else None)
            for i in range(3)]
    return high + [draw_query(f"low{i}", rng, args.base_cost_us, args.low_rate, "low") for i in range(10)]


def _counts(args: argparse.Namespace) -> list[int]:
    return args.queries or ([5, 20] if args.quick else [5, 10, 15, 20])


def _seconds(args: argparse.Namespace) -> float:
    return args.seconds or (3.0 if args.quick else 10.0)


def run_synthetic(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every configuration at every query count, at P = 100 ms (configurations interleaved per count)."""
    return [measure(synthetic_queries(n, args), config, seconds=_seconds(args), threads=args.threads,
                    period_s=0.1, seed=args.seed)
            for n in _counts(args) for config in args.configs]


def run_overhead(args: argparse.Namespace, synthetic: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The overhead rows: the synthetic runs' (P = 100 ms) plus runs at the other periods."""
    rows = [r for r in synthetic if r["overhead"] is not None]
    done = {(r["config"], r["queries"], r["period_s"]) for r in rows}
    policies = [c for c in args.configs if c != "os"]
    for period in args.periods:
        for n in _counts(args):
            for policy in policies:
                if (policy, n, period) not in done:
                    rows.append(measure(synthetic_queries(n, args), policy, seconds=_seconds(args),
                                        threads=args.threads, period_s=period, seed=args.seed))
    return rows


def run_multiclass(args: argparse.Namespace, bursting: bool) -> list[dict[str, Any]]:
    """OS and Multi-class on the scenario's queries."""
    seconds = args.mc_seconds or ((10.0 if bursting else 6.0) if args.quick else (60.0 if bursting else 20.0))
    queries = multiclass_queries(args, bursting)
    rows = []
    for config in ("os", "multiclass"):
        row = measure(queries, config, seconds=seconds, threads=args.threads, period_s=0.1, seed=args.seed)
        row["scenario"] = 2 if bursting else 1
        for summary in row["classes"].values():
            summary["max_latency_flatness"] = flatness(summary["max_latency_series"])
        rows.append(row)
    return rows


def run_delays(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Scenario 2 under Multi-class at each delay d."""
    seconds = args.mc_seconds or (10.0 if args.quick else 40.0)
    queries = multiclass_queries(args, bursting=True)
    rows = []
    for d in args.delays:
        row = measure(queries, "multiclass", seconds=seconds, threads=args.threads, delay_s=d, seed=args.seed)
        row["delay_s"] = d
        rows.append(row)
    return rows


def multiclass_verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Scenario 2's goals: HIGH max latency ≥ 10× lower than OS, LOW mean within 2× of OS."""
    by = {r["config"]: r["classes"] for r in rows}
    if "os" not in by or "multiclass" not in by:
        return {}
    os_high, mc_high = by["os"]["high"]["max_latency_s"], by["multiclass"]["high"]["max_latency_s"]
    os_low, mc_low = by["os"]["low"]["mean_latency_s"], by["multiclass"]["low"]["mean_latency_s"]
    return {"high_max_os_over_multiclass": os_high / mc_high if os_high and mc_high else None,
            "low_mean_multiclass_over_os": mc_low / os_low if os_low and mc_low else None}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the chosen scenarios; write the JSON and PNG to ``--out``."""
    result: dict[str, Any] = {"benchmark": "haren", "quick": args.quick, "threads": args.threads,
                              "base_cost_us": args.base_cost_us, "scenarios": args.scenarios,
                              "notes": {"gil": GIL_NOTE, "os": OS_NOTE}, "machine": machine()}
    synthetic = run_synthetic(args) if {"synthetic", "overhead"} & set(args.scenarios) else []
    if "synthetic" in args.scenarios:
        result["synthetic"] = synthetic
    if "overhead" in args.scenarios:
        result["overhead"] = [overhead_row(r) for r in run_overhead(args, synthetic)]
    for scenario, bursting in (("multiclass1", False), ("multiclass2", True)):
        if scenario in args.scenarios:
            rows = run_multiclass(args, bursting)
            result[scenario] = {"rows": rows, "verdict": multiclass_verdict(rows)}
    if "delays" in args.scenarios:
        result["delays"] = run_delays(args)
    if args.out:
        write_outputs(result, Path(args.out))
    return result


def overhead_row(r: dict[str, Any]) -> dict[str, Any]:
    """A run's overhead in the shape of Figs. 5–7: fractions of worker time per phase."""
    return {"policy": r["config"], "queries": r["queries"], "period_s": r["period_s"],
            "scheduling_tasks": r["overhead"]["scheduling_tasks"], **r["overhead"]["fractions"]}


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """``haren.json`` and ``haren.png`` in ``out``."""
    from elastream.bench._haren_plot import plot

    out.mkdir(parents=True, exist_ok=True)
    result["plot"] = plot(result, str(out / "haren.png"))
    result["json"] = str(out / "haren.json")
    (out / "haren.json").write_text(json.dumps(result, indent=1, allow_nan=False, default=str) + "\n")


def print_report(result: dict[str, Any], console: Console) -> None:
    """One table per scenario."""
    if result.get("synthetic"):
        table = Table(title="§7.3 single-class: OS vs Haren policies (Fig. 4)")
        for col in ("queries", "config", "tuples/s", "mean lat s", "max lat s", "queued", "memory MB", "cores"):
            table.add_column(col, justify="right")
        for r in result["synthetic"]:
            table.add_row(str(r["queries"]), r["config"], fmt(r["throughput_tps"], 0), fmt(r["mean_latency_s"], 3),
                          fmt(r["max_latency_s"], 3), fmt(r["queued_tuples"], 0), fmt(r["memory_mb"], 1),
                          fmt(r["cores_used"], 2))
        console.print(table)
    if result.get("overhead"):
        table = Table(title="T_S overhead, fraction of worker time (Figs. 5-7)")
        for col in ("policy", "P s", "queries", "priority", "sort", "update", "coord", "total", "T_S runs"):
            table.add_column(col, justify="right")
        for r in result["overhead"]:
            table.add_row(r["policy"], f"{r['period_s']:g}", str(r["queries"]),
                          *(f"{100 * r[k]:.2f}%" for k in ("priority", "sort", "update", "coord", "total")),
                          str(r["scheduling_tasks"]))
        console.print(table)
    for scenario in ("multiclass1", "multiclass2"):
        if result.get(scenario):
            _print_multiclass(scenario, result[scenario], console)
    if result.get("delays"):
        table = Table(title="Multi-class scenario 2 by delay d")
        for col in ("d s", "HIGH max s", "HIGH mean s", "LOW mean s", "delayed runs"):
            table.add_column(col, justify="right")
        for r in result["delays"]:
            high, low = r["classes"]["high"], r["classes"]["low"]
            table.add_row(f"{r['delay_s']:g}", fmt(high["max_latency_s"], 3), fmt(high["mean_latency_s"], 3),
                          fmt(low["mean_latency_s"], 3), str(r["overhead"]["delayed_runs"]))
        console.print(table)
    for note in result["notes"].values():
        console.print(note)
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")


def _print_multiclass(scenario: str, data: dict[str, Any], console: Console) -> None:
    table = Table(title=f"Multi-class scenario {scenario[-1]} (Fig. {7 + int(scenario[-1])})")
    for col in ("config", "class", "tuples/s", "mean lat s", "max lat s", "max last/first third"):
        table.add_column(col, justify="right")
    for r in data["rows"]:
        for klass, s in r["classes"].items():
            table.add_row(r["config"], klass, fmt(s["throughput_tps"], 0), fmt(s["mean_latency_s"], 3),
                          fmt(s["max_latency_s"], 3), fmt(s.get("max_latency_flatness"), 2))
    console.print(table)
    verdict = data.get("verdict") or {}
    if verdict:
        console.print(f"HIGH max latency, OS ÷ Multi-class: {fmt(verdict['high_max_os_over_multiclass'], 1)}×; "
                      f"LOW mean latency, Multi-class ÷ OS: {fmt(verdict['low_mean_multiclass_over_os'], 2)}")
