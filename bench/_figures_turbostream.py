"""TurboStream §VI figures (Figs. 8–10) for ``elastream bench figures``.

Fig. 8 (ring vs queue vs TCP) is ``bench ipc``; Fig. 9 (TurboStream's placement
against round-robin) is ``bench processes --placement auto round_robin`` on the
12-operator chain over 2 worker processes; Fig. 10 (latency vs input rate) is
``bench latency`` at several rates. There is no JStorm here: TCP loopback stands
in for Netty, round-robin placement for JStorm's default assignment, and Fig. 10
checks the paper's absolute level (TurboStream under 20 ms) instead of a ratio.
"""

from __future__ import annotations

from typing import Any

from elastream.bench._figures_core import (Figure, Table, Verdict, bench_run, lines, new_axes, ratio, rounded, save,
                                           verdict_of)

PAPER = "turbostream"
#: TurboStream's average processing latency stayed below this up to 40,000 tuples/s (Fig. 10).
PAPER_LATENCY_MS = 20.0


# --- Fig. 8: ring vs queue vs TCP ----------------------------------------------------------------------------


def run_ipc(quick: bool) -> dict[str, Any]:
    """``bench ipc``: latency vs message size, vs rate, vs ring size."""
    return {"ipc": bench_run("ipc", ["--quick"] if quick else ["--repeat", "1"])}


def _points(ipc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(sweep, point label, row) of the size and rate sweeps."""
    return ([("size", f"{r['size_kb']} KB @ {r['rate']:g}/s", r) for r in ipc["latency_vs_size"]]
            + [("rate", f"{r['size_kb']} KB @ {r['rate']:g}/s", r) for r in ipc["latency_vs_rate"]])


def table_ipc(data: dict[str, Any]) -> Table:
    """One row per sweep point and transport: p50, mean and p99 one-way latency."""
    ipc, rows = data["ipc"], []
    for sweep, label, r in _points(ipc):
        for t in ipc["transports"]:
            if t in r:
                rows.append([sweep, label, t, rounded(r[t]["p50_us"]), rounded(r[t]["mean_us"]),
                             rounded(r[t]["p99_us"])])
    for r in ipc["latency_vs_ring_size"]:
        rows.append(["ring size", f"{r['multiple']:g}× message ({r['ring_bytes']:,} B) @ {r['rate']:g}/s", "ring",
                     rounded(r["ring"]["p50_us"]), rounded(r["ring"]["mean_us"]), rounded(r["ring"]["p99_us"])])
    return Table(["sweep", "point", "transport", "p50 µs", "mean µs", "p99 µs"], rows)


def verdict_ipc(data: dict[str, Any]) -> Verdict:
    """The ring beats queue and TCP at every point; reduction vs TCP in the paper's band; small rings cost."""
    ipc = data["ipc"]
    points = [r for _, _, r in _points(ipc)]
    checks: list[tuple[str, bool | None]] = []
    for base in ("queue", "tcp"):
        key = f"ring_vs_{base}_p50"
        measured = [r[key] for r in points if key in r]
        wins = sum(x < 1 for x in measured)
        checks.append((f"ring p50 below {base}'s at {wins} of {len(measured)} size/rate points (needs all)",
                       wins == len(measured) if measured else None))
    cuts = [1 - r["ring_vs_tcp_p50"] for r in points if "ring_vs_tcp_p50" in r]
    if cuts:
        checks.append((f"ring's p50 reduction against TCP (the Netty stand-in) {min(cuts):.0%} to {max(cuts):.0%} "
                       f"(paper: 45.64% to 99.30%; needs ≥ 45% everywhere)", min(cuts) >= 0.45))
    rings = sorted(ipc["latency_vs_ring_size"], key=lambda r: r["multiple"])
    if len(rings) >= 2:
        small, large = rings[0]["ring"]["p50_us"], rings[-1]["ring"]["p50_us"]
        checks.append((f"the smallest ring ({rings[0]['multiple']:g}× the message) has p50 {small:.0f} µs against "
                       f"{large:.0f} µs for {rings[-1]['multiple']:g}× (small rings wait: needs ≥)", small >= large))
    return verdict_of(checks)


def plot_ipc(data: dict[str, Any], path: str) -> str:
    """Fig. 8 (a) p50 vs size, (b) p50 vs rate, (c) ring p50 vs ring size."""
    ipc = data["ipc"]
    fig, (a, b, c) = new_axes(3, width=4.5)
    for ax, rows, x in ((a, ipc["latency_vs_size"], "size_kb"), (b, ipc["latency_vs_rate"], "rate")):
        lines(ax, {t: ([r[x] for r in rows], [r[t]["p50_us"] for r in rows]) for t in ipc["transports"]},
              "message KB" if x == "size_kb" else "messages/s", "p50 one-way latency µs")
    rings = ipc["latency_vs_ring_size"]
    lines(c, {"ring": ([r["multiple"] for r in rings], [r["ring"]["p50_us"] for r in rings])},
          "ring size (messages)", "p50 µs", logx=True)
    a.set_title("(a) message size")
    b.set_title("(b) rate")
    c.set_title("(c) ring size")
    return save(fig, path, "TurboStream Fig. 8: shared-memory ring vs multiprocessing.Queue vs TCP")


# --- Fig. 9: placement vs round-robin -----------------------------------------------------------------------


def run_placement(quick: bool) -> dict[str, Any]:
    """``bench processes``: the chain over 2 processes, placed by TurboStream §V and round-robin."""
    budget = ["--seconds", "4", "--warmup", "1.5"] if quick else ["--seconds", "8", "--warmup", "2"]
    return {"processes": bench_run("processes", ["--processes", "2", "--placement", "auto", "round_robin",
                                                 *budget, "--hop-tuples", "0"])}


def table_placement(data: dict[str, Any]) -> Table:
    """placement, throughput, latency."""
    return Table(["processes", "placement", "tuples/s", "p50 latency ms", "p99 latency ms"],
                 [[r["processes"], r["placement"], rounded(r["throughput_tuples_per_s"]),
                   rounded(r["p50_latency_ms"]), rounded(r["p99_latency_ms"])]
                  for r in data["processes"]["results"]])


def _placement_row(data: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((r for r in data["processes"]["results"] if r["placement"] == name), None)


def verdict_placement(data: dict[str, Any]) -> Verdict:
    """The placement's latency is below round-robin's at no loss of throughput."""
    auto, rr = _placement_row(data, "auto"), _placement_row(data, "round_robin")
    if auto is None or rr is None:
        return verdict_of([("both placements measured", None)])
    lat = ratio(auto["p50_latency_ms"], rr["p50_latency_ms"])
    tp = ratio(auto["throughput_tuples_per_s"], rr["throughput_tuples_per_s"])
    return verdict_of([
        (f"placement's p50 latency is {lat:.2f}× round-robin's (< 1: fewer cross-process hops)" if lat else
         "p50 latency of both placements", None if lat is None else lat < 1),
        (f"placement's throughput is {tp:.2f}× round-robin's (≥ 0.95)" if tp else "throughput of both placements",
         None if tp is None else tp >= 0.95)])


def plot_placement(data: dict[str, Any], path: str) -> str:
    """Bars: throughput and p50 latency per placement."""
    rows = data["processes"]["results"]
    fig, (ax_tp, ax_lat) = new_axes(2, width=4.5)
    names = [r["placement"] for r in rows]
    ax_tp.bar(names, [r["throughput_tuples_per_s"] for r in rows])
    ax_tp.set(ylabel="tuples/s", title="throughput")
    ax_lat.bar(names, [r["p50_latency_ms"] or 0 for r in rows])
    ax_lat.set(ylabel="ms", title="p50 latency")
    return save(fig, path, "TurboStream Fig. 9: placement vs round-robin, 12-operator chain on 2 processes")


# --- Fig. 10: latency vs input rate -------------------------------------------------------------------------


def run_rates(quick: bool) -> dict[str, Any]:
    """``bench latency`` at each input rate: one worker thread and plain ``Runner()``."""
    rates, seconds = ([1000, 3000, 6000], "3") if quick else ([1000, 2500, 5000, 10000, 20000], "10")
    return {"runs": [bench_run("latency", ["--rate", str(rate), "--seconds", seconds, "--threads", "1"])
                     for rate in rates]}


def _rate_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"rate": run["rate"], **r} for run in data["runs"] for r in run["results"]]


def table_rates(data: dict[str, Any]) -> Table:
    """rate, configuration, achieved rate, latency."""
    return Table(["input tuples/s", "runner", "achieved tuples/s", "mean ms", "p50 ms", "p99 ms"],
                 [[r["rate"], f"threads={r['threads']}" if isinstance(r["threads"], int) else r["threads"],
                   rounded(r["achieved_tuples_per_s"]), rounded(r["mean_ms"]), rounded(r["p50_ms"]),
                   rounded(r["p99_ms"])] for r in _rate_rows(data)])


def verdict_rates(data: dict[str, Any]) -> Verdict:
    """Every rate sustained, and the mean latency under the paper's 20 ms at each."""
    rows = _rate_rows(data)
    kept = [r for r in rows if (r["achieved_over_target"] or 0) >= 0.95]
    low = [r for r in kept if r["mean_ms"] is not None and r["mean_ms"] < PAPER_LATENCY_MS]
    return verdict_of([
        (f"{len(kept)} of {len(rows)} (rate, runner) runs sustained ≥ 95% of the input rate", len(kept) == len(rows)),
        (f"mean latency below {PAPER_LATENCY_MS:g} ms (TurboStream's level) in {len(low)} of {len(kept)} sustained "
         f"runs", len(low) == len(kept) if kept else None)])


def plot_rates(data: dict[str, Any], path: str) -> str:
    """Mean and p99 latency vs input rate, one line per runner."""
    rows = _rate_rows(data)
    configs = list(dict.fromkeys(str(r["threads"]) for r in rows))
    fig, (ax_mean, ax_p99) = new_axes(2)
    for ax, key in ((ax_mean, "mean_ms"), (ax_p99, "p99_ms")):
        lines(ax, {c: ([r["rate"] for r in rows if str(r["threads"]) == c],
                       [r[key] for r in rows if str(r["threads"]) == c]) for c in configs},
              "input tuples/s", key.replace("_ms", " latency ms"))
    return save(fig, path, "TurboStream Fig. 10: latency vs input rate (threads=1 and Runner())")


def figures() -> list[Figure]:
    """TurboStream Figs. 8–10."""
    return [
        Figure(PAPER, "fig8", "Improved IPC: latency vs message size, rate and ring size",
               "The shared-memory ring cuts intra-node message latency against Netty by 45.64% to 99.30% over "
               "10–320 KB messages and 100–3,000 msg/s; a ring of 50–100 messages suits, small rings wait.",
               run_ipc, table_ipc, verdict_ipc, plot_ipc,
               "--quick: 2 sizes, 2 rates, 2 ring sizes, 20 messages a point (full: the paper's 6 sizes, 5 rates, "
               "6 ring sizes); TCP loopback stands in for Netty."),
        Figure(PAPER, "fig9", "Processing latency: coarse-grained placement vs the default assignment",
               "Consolidating communicating tasks into the same worker lowers the average processing latency "
               "against JStorm's assignment (by up to 38.90% from the scheduler alone).",
               run_placement, table_placement, verdict_placement, plot_placement,
               "The 12-operator Busy chain (GIL held) on 2 worker processes, saturated, so latency includes "
               "queueing; round-robin stands in for JStorm's assignment; 4 s runs (full: 8 s)."),
        Figure(PAPER, "fig10", "Average processing latency under different input rates",
               "TurboStream's average processing latency stays below 20 ms as the input rate grows to 40,000 "
               "tuples/s (JStorm's reaches 142 ms).",
               run_rates, table_rates, verdict_rates, plot_rates,
               "The 4-stage pure-Python latency pipeline at 1,000–6,000 tuples/s for 3 s each (full: 1,000–20,000 "
               "for 10 s) instead of up to 80,000; one worker thread and plain Runner(); no JStorm to compare."),
    ]
