"""Haren §7 Figs. 4, 5, 8 and 9 for ``elastream bench figures``, from ``elastream bench haren``.

Fig. 4 compares OS scheduling (a thread per operator: ``Runner(model="dedicated")``) with Haren's
FCFS, HR and Chain on 5-20 synthetic queries; Fig. 5 is the scheduling task's overhead (with Fig. 7's
two periods); Figs. 8-9 are the Multi-class scenarios (steady; HIGH bursting over a constant LOW load).
Scaled: 2 worker threads, Busy operators releasing the GIL, rates of hundreds of tuples/s, runs of
seconds (the paper: 4 threads on an Odroid, thousands of tuples/s, five-minute runs).
"""

from __future__ import annotations

from typing import Any

from elastream.bench._figures_core import Figure, Table, Verdict, bench_run, rounded, verdict_of
from elastream.bench._haren_plot import plot

PAPER = "haren"
SCALE = ("2 worker threads (OS: one thread per operator), Busy operators with the GIL released, B = 5 µs, rates of "
         "hundreds of tuples/s per source; --quick: 5 and 20 queries, runs of 3 s (multi-class 6 s steady, 10 s "
         "bursting 1.25 s on / 3.75 s off); full: 5, 10, 15, 20 queries, 10 s runs (multi-class 20 s; 60 s "
         "bursting 5 s on / 15 s off). Figs. 4 and 5 share one run: the overhead at P = 100 ms is read from the "
         "Fig. 4 runs of FCFS, HR and Chain.")


#: Figs. 4 and 5 share one ``bench haren --scenarios synthetic overhead`` run (per --quick): the overhead
#: rows at P = 100 ms are the synthetic runs' own, so only the other period is run for Fig. 5.
_shared: dict[bool, dict[str, Any]] = {}


def _run(scenarios: str | list[str], quick: bool, extra: list[str] | None = None) -> dict[str, Any]:
    names = [scenarios] if isinstance(scenarios, str) else scenarios
    argv = ["--scenarios", *names, "--out", "", *(extra or [])] + (["--quick"] if quick else [])
    return bench_run("haren", argv)


def run_single_class(quick: bool) -> dict[str, Any]:
    """OS, FCFS, HR and Chain on the synthetic queries, and the scheduling task's overhead (cached for Fig. 5)."""
    if quick not in _shared:
        _shared[quick] = _run(["synthetic", "overhead"], quick)
    return _shared[quick]


def _only(data: dict[str, Any], key: str) -> dict[str, Any]:
    """One scenario of the shared run (each figure's plot draws its own panels only)."""
    return {key: data[key]} if key in data else {}


def _largest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    top = max(r["queries"] for r in rows)
    return [r for r in rows if r["queries"] == top]


def _value(rows: list[dict[str, Any]], config: str, key: str) -> float | None:
    return next((r[key] for r in rows if r["config"] == config), None)


def _less(text: str, a: float | None, b: float | None, factor: float = 1.0) -> tuple[str, bool | None]:
    shown = f"{text}: {_num(a)} vs {_num(b)}"
    return shown, None if a is None or b is None else a * factor < b


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def table_fig4(data: dict[str, Any]) -> Table:
    """queries, configuration, throughput, latencies, queued tuples, memory, cores."""
    return Table(["queries", "config", "tuples/s", "mean latency s", "max latency s", "queued", "memory MB", "cores"],
                 [[r["queries"], r["config"], rounded(r["throughput_tps"]), rounded(r["mean_latency_s"]),
                   rounded(r["max_latency_s"]), rounded(r["queued_tuples"]), rounded(r["memory_mb"]),
                   rounded(r["cores_used"])] for r in data["synthetic"]])


def verdict_fig4(data: dict[str, Any]) -> Verdict:
    """At the most queries: FCFS's max and HR's mean latency below OS's; Chain queues fewer tuples than OS."""
    rows = _largest(data["synthetic"])
    n = rows[0]["queries"]
    return verdict_of([
        _less(f"{n} queries, max latency s FCFS < OS", _value(rows, "fcfs", "max_latency_s"),
              _value(rows, "os", "max_latency_s")),
        _less(f"{n} queries, mean latency s HR < OS", _value(rows, "hr", "mean_latency_s"),
              _value(rows, "os", "mean_latency_s")),
        _less(f"{n} queries, queued tuples Chain < OS", _value(rows, "chain", "queued_tuples"),
              _value(rows, "os", "queued_tuples")),
    ])


def table_fig5(data: dict[str, Any]) -> Table:
    """policy, period, queries, and each phase as a percentage of worker time."""
    keys = ("priority", "sort", "update", "coord", "total")
    return Table(["policy", "P s", "queries", *(f"{k} %" for k in keys)],
                 [[r["policy"], r["period_s"], r["queries"], *(rounded(100 * r[k]) for k in keys)]
                  for r in data["overhead"]])


def verdict_fig5(data: dict[str, Any]) -> Verdict:
    """With the most queries: T_S total below 5 % of worker time at P = 100 ms and below 2 % at P = 250 ms."""
    rows = data["overhead"]
    top = max(r["queries"] for r in rows)
    checks = []
    for r in rows:
        if r["queries"] != top or r["period_s"] not in (0.1, 0.25):
            continue
        bound = 0.05 if r["period_s"] == 0.1 else 0.02
        checks.append((f"{r['policy']}, P = {r['period_s']:g} s, {top} queries: {100 * r['total']:.2f}% "
                       f"< {100 * bound:g}%", r["total"] < bound))
    return verdict_of(checks)


def table_multiclass(data: dict[str, Any]) -> Table:
    """configuration, class, throughput, latencies, and the max latency's last third ÷ first third."""
    rows = []
    for r in data["rows"]:
        for klass, s in r["classes"].items():
            rows.append([r["config"], klass, rounded(s["throughput_tps"]), rounded(s["mean_latency_s"]),
                         rounded(s["max_latency_s"]), rounded(s.get("max_latency_flatness"))])
    return Table(["config", "class", "tuples/s", "mean latency s", "max latency s", "max last/first third"], rows)


def _class(data: dict[str, Any], config: str, klass: str, key: str) -> float | None:
    row = next((r for r in data["rows"] if r["config"] == config), None)
    return None if row is None else row["classes"].get(klass, {}).get(key)


def verdict_fig8(data: dict[str, Any]) -> Verdict:
    """HIGH's mean and max latency below OS's; LOW's mean latency within 2× of OS's."""
    d = data
    return verdict_of([
        _less("HIGH mean latency s Multi-class < OS", _class(d, "multiclass", "high", "mean_latency_s"),
              _class(d, "os", "high", "mean_latency_s")),
        _less("HIGH max latency s Multi-class < OS", _class(d, "multiclass", "high", "max_latency_s"),
              _class(d, "os", "high", "max_latency_s")),
        _less("LOW mean latency s Multi-class < 2 × OS", _class(d, "multiclass", "low", "mean_latency_s"),
              _class(d, "os", "low", "mean_latency_s"), factor=0.5),
    ])


def verdict_fig9(data: dict[str, Any]) -> Verdict:
    """HIGH's max latency ≥ 10× below OS's and flat; LOW's mean latency within 2× of OS's."""
    d = data
    flat = _class(d, "multiclass", "high", "max_latency_flatness")
    return verdict_of([
        _less("HIGH max latency s 10 × Multi-class < OS", _class(d, "multiclass", "high", "max_latency_s"),
              _class(d, "os", "high", "max_latency_s"), factor=10.0),
        (f"HIGH max latency under Multi-class flat (last third ÷ first third {_num(flat)} ≤ 2)",
         None if flat is None else flat <= 2.0),
        _less("LOW mean latency s Multi-class < 2 × OS", _class(d, "multiclass", "low", "mean_latency_s"),
              _class(d, "os", "low", "mean_latency_s"), factor=0.5),
    ])


def figures() -> list[Figure]:
    """Haren Figs. 4, 5, 8, 9."""
    return [
        Figure(PAPER, "fig4", "Single-class scheduling policies vs OS scheduling",
               "Past light load, Haren's HR and FCFS give lower mean and maximum latency than OS scheduling of one "
               "thread per operator, and Chain keeps the fewest tuples queued.",
               run_single_class, table_fig4, verdict_fig4, lambda d, p: plot(_only(d, "synthetic"), p), SCALE),
        Figure(PAPER, "fig5", "Overhead of the scheduling task",
               "The scheduling task costs almost always under 2% of the processing threads' time, under 5% at "
               "worst (shorter periods and more queries cost more).",
               run_single_class, table_fig5, verdict_fig5, lambda d, p: plot(_only(d, "overhead"), p), SCALE),
        Figure(PAPER, "fig8", "Multi-class scenario 1 (steady state)",
               "In steady state Haren gives the HIGH queries much lower mean and maximum latency than OS "
               "scheduling while the LOW queries' mean latency stays at the OS's level.",
               lambda quick: _mc(_run("multiclass1", quick), "multiclass1"), table_multiclass, verdict_fig8,
               lambda d, p: plot({"multiclass1": d}, p), SCALE),
        Figure(PAPER, "fig9", "Multi-class scenario 2 (dynamic, high load)",
               "Under fluctuating overload Haren keeps the HIGH queries' maximum latency low and flat, far below "
               "OS scheduling's, while the LOW queries' mean latency stays moderate.",
               lambda quick: _mc(_run("multiclass2", quick), "multiclass2"), table_multiclass, verdict_fig9,
               lambda d, p: plot({"multiclass2": d}, p), SCALE),
    ]


def _mc(result: dict[str, Any], scenario: str) -> dict[str, Any]:
    """A multi-class scenario's rows and verdict, with the command that measured them."""
    return {**result[scenario], "command": result["command"]}
