"""C-Stream §5.1 figures (Figs. 4–8) for ``elastream bench figures``, measured with ``bench topology``.

Scaled to 2 cores: Busy operators release the GIL (``--gil release``, C-Stream is
C++ and its threads run in parallel), thread counts go to 4 (twice the cores)
instead of 12, and the cost / size / selectivity sweeps run on 2 threads (the
paper fixes 4 threads on a many-core machine). Fusion is off in ``bench
topology``, as in the paper's scheduler experiments.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from elastream.bench._figures_core import (Figure, Table, Verdict, bench_run, lines, new_axes, ratio, rounded, save,
                                           verdict_of)

PAPER = "c-stream"
TOPOLOGIES = ("chain", "data-parallel", "tree", "reverse-tree")
QUICK_POLICIES = ["random", "max_queue", "least_recently_run"]
FULL_POLICIES = QUICK_POLICIES + ["max_tuple_wait", "max_running_time"]
CHAIN_OPS = 12
SWEEP_THREADS = 2
SCALE_THREADS = ("Busy operators release the GIL (C-Stream's C++ threads run in parallel); threads 1, 2, 4 with "
                 "--quick (full: 1–4) on 2 cores instead of 1–12; 3 plug-ins with --quick (full: 5); runs of 2 s "
                 "with --quick (full: 3 s), the first 0.5 s excluded.")
SCALE_SWEEP = ("Busy operators release the GIL; 2 threads (the paper: 4 on a many-core machine); 3 plug-ins with "
               "--quick (full: 5); runs of 2 s with --quick (full: 3 s); the point at bench topology's default "
               "(100 µs, 12 operators, selectivity 1) is Fig. 4's 2-thread run of the same flow, not run twice.")

_threads_cache: dict[bool, dict[str, Any]] = {}


def _budget(quick: bool) -> list[str]:
    return ["--seconds", "2", "--warmup", "0.5"] if quick else ["--seconds", "3", "--warmup", "0.5"]


def _policies(quick: bool) -> list[str]:
    return QUICK_POLICIES if quick else FULL_POLICIES


def _flat(results: Sequence[dict[str, Any]], x_key: str | None = None) -> list[dict[str, Any]]:
    """One row per (x, policy, threads) from ``bench topology`` results; ``x_key`` names the swept option."""
    rows = []
    for res in results:
        for r in res["results"]:
            rows.append({"topology": res["topology"], "x": res.get(x_key) if x_key else None,
                         "policy": r["policy"], "threads": r["threads"],
                         "tuples_per_s": r["throughput_tuples_per_s"], "mean_ms": r["mean_latency_ms"],
                         "p99_ms": r["p99_latency_ms"]})
    return rows


# --- Figs. 4–5: threads × plug-ins × topologies ------------------------------------------------------------


def run_threads(quick: bool) -> dict[str, Any]:
    """Every topology × plug-in × thread count once (cached: Figs. 4 and 5 share the runs)."""
    if quick not in _threads_cache:
        threads = ["1", "2", "4"] if quick else ["1", "2", "3", "4"]
        runs = [bench_run("topology", ["--topology", topo, "--gil", "release", "--policy", policy,
                                       "--threads", *threads, *_budget(quick)])
                for topo in TOPOLOGIES for policy in _policies(quick)]
        _threads_cache[quick] = {"runs": runs, "rows": _flat(runs), "cpus": os.cpu_count()}
    return _threads_cache[quick]


def table_threads(data: dict[str, Any]) -> Table:
    """topology, plug-in, threads, throughput, latency."""
    return Table(["topology", "plug-in", "threads", "tuples/s", "mean latency ms", "p99 latency ms"],
                 [[r["topology"], r["policy"], r["threads"], rounded(r["tuples_per_s"]), rounded(r["mean_ms"]),
                   rounded(r["p99_ms"])] for r in data["rows"]])


def _best_at(rows: list[dict[str, Any]], topology: str, threads: int, key: str = "tuples_per_s") -> float | None:
    values = [r[key] for r in rows if r["topology"] == topology and r["threads"] == threads and r[key] is not None]
    return max(values) if values else None


def _peak(rows: list[dict[str, Any]], topology: str, policy: str) -> float | None:
    values = [r["tuples_per_s"] for r in rows if r["topology"] == topology and r["policy"] == policy]
    return max(values) if values else None


def verdict_fig4(data: dict[str, Any]) -> Verdict:
    """Chain scales to the cores; the others stop gaining past the cores; Random is robust."""
    rows, cores = data["rows"], min(data.get("cpus") or 2, 2)
    most = max(r["threads"] for r in rows)
    gain = ratio(_best_at(rows, "chain", cores), _best_at(rows, "chain", 1))
    checks: list[tuple[str, bool | None]] = [
        (f"chain: best throughput at {cores} threads is {_fmt(gain)}× that at 1 thread (≥ 1.3: scales with "
         f"threads up to the cores)", None if gain is None else gain >= 1.3)]
    for topo in TOPOLOGIES[1:]:
        past = ratio(_best_at(rows, topo, most), _best_at(rows, topo, cores))
        checks.append((f"{topo}: {most} threads give {_fmt(past)}× the throughput of {cores} (≤ 1.1: no gain past "
                       f"the cores, the paper's rise-then-fall scaled to {cores} cores)",
                       None if past is None else past <= 1.1))
    worst = min((ratio(_peak(rows, t, "random"), max(_peak(rows, t, p) or 0 for p in _policy_set(rows)))
                 or 0.0) for t in TOPOLOGIES)
    checks.append((f"Random's peak is ≥ 0.8 of the best plug-in's on every topology (worst {_fmt(worst)})",
                   worst >= 0.8))
    return verdict_of(checks)


def verdict_fig5(data: dict[str, Any]) -> Verdict:
    """LeastRecently gives (near-)best chain latency; MaxQueue's latency is high at few threads."""
    rows, cores = data["rows"], min(data.get("cpus") or 2, 2)
    counts = sorted({r["threads"] for r in rows})
    near = [_within(rows, "chain", t, "least_recently_run", 1.1) for t in counts]
    near_ok = [n for n in near if n is not None]
    lrr = _value(rows, "data-parallel", 1, "least_recently_run", "mean_ms")
    mq = _value(rows, "data-parallel", 1, "max_queue", "mean_ms")
    drop = ratio(_min_latency(rows, "chain", cores), _min_latency(rows, "chain", 1))
    return verdict_of([
        (f"chain: least_recently_run's mean latency is within 10% of the lowest at {sum(near_ok)} of "
         f"{len(near_ok)} thread counts (needs most)", bool(near_ok) and sum(near_ok) * 2 > len(near_ok)),
        (f"data-parallel, 1 thread: max_queue's mean latency {_fmt(mq)} ms is above least_recently_run's "
         f"{_fmt(lrr)} ms", None if mq is None or lrr is None else mq > lrr),
        (f"chain: the lowest mean latency at {cores} threads is {_fmt(drop)}× that at 1 thread (< 1: latency "
         f"falls as threads rise)", None if drop is None else drop < 1.0)])


def _policy_set(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["policy"] for r in rows))


def _value(rows: list[dict[str, Any]], topology: str, threads: int, policy: str, key: str) -> float | None:
    return next((r[key] for r in rows if (r["topology"], r["threads"], r["policy"]) == (topology, threads, policy)),
                None)


def _min_latency(rows: list[dict[str, Any]], topology: str, threads: int) -> float | None:
    values = [r["mean_ms"] for r in rows if r["topology"] == topology and r["threads"] == threads and r["mean_ms"]]
    return min(values) if values else None


def _within(rows: list[dict[str, Any]], topology: str, threads: int, policy: str, slack: float) -> bool | None:
    mine, lowest = _value(rows, topology, threads, policy, "mean_ms"), _min_latency(rows, topology, threads)
    return None if mine is None or lowest is None else mine <= slack * lowest


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _plot_by_topology(data: dict[str, Any], path: str, key: str, ylabel: str, title: str) -> str:
    rows = data["rows"]
    fig, axes = new_axes(len(TOPOLOGIES), width=4.2)
    for ax, topo in zip(axes, TOPOLOGIES):
        mine = [r for r in rows if r["topology"] == topo]
        lines(ax, {p: ([r["threads"] for r in mine if r["policy"] == p], [r[key] for r in mine if r["policy"] == p])
                   for p in _policy_set(mine)}, "threads", ylabel)
        ax.set_xticks(sorted({r["threads"] for r in mine}))
        ax.set_title(topo)
    return save(fig, path, title)


def plot_fig4(data: dict[str, Any], path: str) -> str:
    """Throughput vs threads, one panel per topology, one line per plug-in."""
    return _plot_by_topology(data, path, "tuples_per_s", "tuples/s", "C-Stream Fig. 4: threads vs throughput")


def plot_fig5(data: dict[str, Any], path: str) -> str:
    """Mean latency vs threads, one panel per topology, one line per plug-in."""
    return _plot_by_topology(data, path, "mean_ms", "mean latency ms", "C-Stream Fig. 5: threads vs latency")


# --- Figs. 6–8: sweeps of cost, data-parallel width and selectivity -----------------------------------------


#: ``bench topology``'s defaults: a sweep's point at these values is the run Fig. 4 made at 2 threads.
TOPOLOGY_DEFAULTS = {"--cost-us": 100.0, "--ops": 12.0, "--selectivity": 1.0}


def _sweep(topology: str, option: str, values: Sequence[float], quick: bool) -> list[dict[str, Any]]:
    """One ``bench topology`` run per (value, plug-in) at 2 threads; the point at the default value is taken
    from Fig. 4's runs when they were made in this process (the same flow, threads and budget)."""
    runs = []
    for value in values:
        for policy in _policies(quick):
            shared = _from_threads_run(topology, policy, quick) if value == TOPOLOGY_DEFAULTS[option] else None
            runs.append(shared or bench_run("topology", [
                "--topology", topology, "--gil", "release", "--policy", policy, "--threads", str(SWEEP_THREADS),
                option, f"{value:g}", *_budget(quick)]))
    return runs


def _from_threads_run(topology: str, policy: str, quick: bool) -> dict[str, Any] | None:
    """Fig. 4's ``bench topology`` result of one topology and plug-in cut to its 2-thread row (None if not run)."""
    cached = _threads_cache.get(quick)
    if cached is None:
        return None
    for run in cached["runs"]:
        rows = [r for r in run["results"] if r["threads"] == SWEEP_THREADS and r["policy"] == policy]
        if run["topology"] == topology and rows:
            return {**run, "results": rows}
    return None


def run_cost(quick: bool) -> dict[str, Any]:
    """Data-parallel, 12 Busy operators, 2 threads, cost per tuple swept."""
    costs = [50, 100, 200] if quick else [25, 50, 100, 200, 400]
    runs = _sweep("data-parallel", "--cost-us", costs, quick)
    return {"x": "cost µs", "runs": runs, "rows": _flat(runs, "cost_us")}


def run_size(quick: bool) -> dict[str, Any]:
    """Data-parallel, 100 µs Busy operators, 2 threads, number of parallel operators swept."""
    sizes = [4, 8, 16] if quick else [4, 8, 12, 16, 24]
    runs = _sweep("data-parallel", "--ops", sizes, quick)
    return {"x": "data-parallel operators", "runs": runs, "rows": _flat(runs, "busy_operators")}


def run_selectivity(quick: bool) -> dict[str, Any]:
    """Chain of 12 Busy operators, 2 threads, selectivity swept; input rate = sink rate ÷ s^12."""
    values = [0.8, 0.9, 1.0] if quick else [0.7, 0.8, 0.9, 1.0]
    runs = _sweep("chain", "--selectivity", values, quick)
    rows = _flat(runs, "selectivity")
    for r in rows:
        # The sink sees s^12 of the input (Busy forwards each tuple with probability s): the paper's throughput
        # falls with s only when counted at the input, so the input rate is derived from the sink's.
        r["tuples_per_s"] = r["tuples_per_s"] / r["x"] ** CHAIN_OPS if r["x"] else None
    return {"x": "selectivity", "runs": runs, "rows": rows, "note": "tuples/s: input rate = sink rate ÷ s^12"}


def table_sweep(data: dict[str, Any]) -> Table:
    """x, plug-in, throughput, latency."""
    return Table([data["x"], "plug-in", "tuples/s", "mean latency ms", "p99 latency ms"],
                 [[r["x"], r["policy"], rounded(r["tuples_per_s"]), rounded(r["mean_ms"]), rounded(r["p99_ms"])]
                  for r in data["rows"]])


def _series(data: dict[str, Any], policy: str, key: str) -> list[float | None]:
    return [r[key] for r in sorted(data["rows"], key=lambda r: r["x"]) if r["policy"] == policy]


def monotone(values: Sequence[float | None], rising: bool, slack: float = 1.05) -> bool | None:
    """Whether ``values`` rise (or fall) step by step, each step allowed ``slack`` of noise the wrong way."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    pairs = list(zip(known, known[1:]))
    return all(b * slack >= a for a, b in pairs) if rising else all(b <= a * slack for a, b in pairs)


def _all_policies(data: dict[str, Any], key: str, rising: bool) -> tuple[list[str], bool | None]:
    """The plug-ins whose ``key`` series is not monotone that way, and whether all are."""
    bad = [p for p in _policy_set(data["rows"]) if monotone(_series(data, p, key), rising) is False]
    return bad, not bad


def verdict_cost(data: dict[str, Any]) -> Verdict:
    """Throughput falls, latency rises, about linearly with the cost."""
    bad_tp, tp_ok = _all_policies(data, "tuples_per_s", rising=False)
    bad_lat, lat_ok = _all_policies(data, "mean_ms", rising=True)
    xs = sorted({r["x"] for r in data["rows"]})
    fall = ratio(_series(data, "random", "tuples_per_s")[0], _series(data, "random", "tuples_per_s")[-1])
    span = xs[-1] / xs[0]
    return verdict_of([
        (f"throughput falls as the cost rises for every plug-in{_except(bad_tp)}", tp_ok),
        (f"mean latency rises with the cost for every plug-in{_except(bad_lat)}", lat_ok),
        (f"about linear: Random's throughput falls {_fmt(fall)}× over a {span:g}× cost range (≥ half of it)",
         None if fall is None else fall >= span / 2)])


def verdict_size(data: dict[str, Any]) -> Verdict:
    """Throughput about flat with the width (operators ≥ threads); MaxQueue's latency grows."""
    flat = {}
    for p in _policy_set(data["rows"]):
        tp = [v for v in _series(data, p, "tuples_per_s") if v]
        flat[p] = max(tp) / min(tp) if tp else None
    steady = [p for p, spread in flat.items() if p != "max_queue" and spread is not None and spread > 1.25]
    mq = _series(data, "max_queue", "mean_ms")
    growth = ratio(mq[-1], mq[0]) if mq else None
    return verdict_of([
        (f"throughput within 1.25× across widths for every plug-in but max_queue{_except(steady)}", not steady),
        (f"max_queue's mean latency grows with the width ({_fmt(growth)}× from the narrowest to the widest; ≥ 1.2)",
         None if growth is None else growth >= 1.2)])


def verdict_selectivity(data: dict[str, Any]) -> Verdict:
    """Input throughput falls and latency rises as selectivity rises."""
    bad_tp, tp_ok = _all_policies(data, "tuples_per_s", rising=False)
    bad_lat, lat_ok = _all_policies(data, "mean_ms", rising=True)
    return verdict_of([(f"input throughput falls as selectivity rises for every plug-in{_except(bad_tp)}", tp_ok),
                       (f"mean latency rises with selectivity for every plug-in{_except(bad_lat)}", lat_ok)])


def _except(bad: list[str]) -> str:
    return f" (not: {', '.join(bad)})" if bad else ""


def plot_sweep(data: dict[str, Any], path: str, title: str) -> str:
    """Throughput and mean latency against the swept value, one line per plug-in."""
    fig, (ax_tp, ax_lat) = new_axes(2)
    policies = _policy_set(data["rows"])
    xs = sorted({r["x"] for r in data["rows"]})
    lines(ax_tp, {p: (xs, _series(data, p, "tuples_per_s")) for p in policies}, data["x"], "tuples/s")
    lines(ax_lat, {p: (xs, _series(data, p, "mean_ms")) for p in policies}, data["x"], "mean latency ms")
    return save(fig, path, title)


def figures() -> list[Figure]:
    """C-Stream Figs. 4–8."""
    return [
        Figure(PAPER, "fig4", "Number of threads vs throughput (chain, data-parallel, tree, reverse tree)",
               "Chain throughput grows with the threads; data-parallel, tree and reverse tree rise to a peak and "
               "then fall with more threads; Random is robust across topologies.",
               run_threads, table_threads, verdict_fig4, plot_fig4, SCALE_THREADS),
        Figure(PAPER, "fig5", "Number of threads vs latency",
               "LeastRecently gives the best latency on the chain; MaxQueue's latency is significantly higher at "
               "small thread counts; latency falls as threads are added to the chain.",
               run_threads, table_threads, verdict_fig5, plot_fig5, SCALE_THREADS),
        Figure(PAPER, "fig6", "Data-parallel cost experiments",
               "On the data-parallel topology at fixed threads, throughput falls and latency rises about linearly "
               "with the busy operators' cost.",
               run_cost, table_sweep, verdict_cost,
               lambda d, p: plot_sweep(d, p, "C-Stream Fig. 6: data-parallel, cost per tuple"), SCALE_SWEEP),
        Figure(PAPER, "fig7", "Data-parallel application size experiments",
               "With at least as many data-parallel operators as threads, throughput barely changes with their "
               "number (MaxQueue's rises), while MaxQueue's latency grows with it.",
               run_size, table_sweep, verdict_size,
               lambda d, p: plot_sweep(d, p, "C-Stream Fig. 7: data-parallel width"), SCALE_SWEEP),
        Figure(PAPER, "fig8", "Chain selectivity experiments",
               "On the chain, throughput decreases and latency increases as operator selectivity increases.",
               run_selectivity, table_sweep, verdict_selectivity,
               lambda d, p: plot_sweep(d, p, "C-Stream Fig. 8: chain selectivity (input tuples/s)"),
               SCALE_SWEEP + " Throughput is counted at the input: the sink's rate ÷ s^12."),
    ]
