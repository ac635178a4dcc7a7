"""IBM Streams elastic scheduler §5 Figs. 8–9 for ``elastream bench figures``, from ``bench models``.

1,000 Busy operators (pure-Python, GIL held) under the threading models:
manual (one thread), dedicated (a thread per operator), plain ``Runner()``
(dynamic, elastic) and the pool at fixed levels. Fig. 8 is the pipeline and the
1,000-wide data-parallel graph, Fig. 9 the mixed graph (width 10, depth 100), at
the paper's costs per tuple. Scaled: short runs, thread levels 1–2 instead of up
to 176, and the GIL held, so threads add no CPU (the paper's curves rise with
threads; here only the overheads of each model differ).
"""

from __future__ import annotations

from typing import Any

from elastream.bench._figures_core import Figure, Table, Verdict, bench_run, lines, new_axes, rounded, save, verdict_of

PAPER = "ibm"
#: Pool levels of the full run: 1 and the cores (with the GIL held a level past the cores adds no CPU; in the last
#: full run, de7426c, 4 threads measured below the best dynamic level at every graph and cost).
LEVELS = ["1", "2"]
CONFIGS = ["manual", "dedicated", "dynamic", *(f"dynamic t{n}" for n in LEVELS)]
SCALE = ("GIL held (pure-Python Busy operators: threads add no CPU, so only each model's overheads differ); "
         "--quick: the paper's lowest and highest cost, manual, dedicated, plain Runner() and 2 pool threads, "
         "runs of 3 s with the last 1.5 s counted; full: the paper's three costs, pool levels 1 and 2 (the cores; "
         "not up to 176: a level of 4 was below the best dynamic one at every graph and cost of the last full "
         "run, de7426c), 10 s runs, the last 4 s counted. The work rate is operator tuples ÷ 1,000.")


#: Per graph, the paper's lowest and highest cost per tuple (flops): the two --quick measures.
QUICK_FLOPS = {"pipeline": ["1", "1000"], "data-parallel": ["1", "100000"], "mixed": ["1", "1000"]}
QUICK_CONFIGS = ["manual", "dedicated", "dynamic", "dynamic t2"]


def _run(shapes: list[str], quick: bool) -> dict[str, Any]:
    """``bench models`` once per graph (with --quick: two costs and four models; else the paper's three costs)."""
    runs = []
    for shape in shapes:
        argv = ["--shapes", shape, "--gil", "hold"]
        if quick:
            argv += ["--flops", *QUICK_FLOPS[shape], "--seconds", "3", "--window", "1.5", "--configs", *QUICK_CONFIGS]
        else:
            argv += ["--seconds", "10", "--window", "4", "--threads", *LEVELS, "--configs", *CONFIGS]
        # bench models draws its own progress bar; the suite's is already showing.
        runs.append(bench_run("models", argv, extra={"progress": False}))
    return {"runs": runs}


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for run in data["runs"] for r in run["results"]]


def _rate(data: dict[str, Any], shape: str, flops: float, config: str) -> float | None:
    return next((r["tuples_per_s"] for r in _rows(data)
                 if (r["shape"], r["flops"], r["config"]) == (shape, flops, config)), None)


def _best_dynamic(data: dict[str, Any], shape: str, flops: float) -> float | None:
    rates = [r["tuples_per_s"] for r in _rows(data)
             if (r["shape"], r["flops"]) == (shape, flops) and r["config"].startswith("dynamic")]
    known = [r for r in rates if r is not None]
    return max(known) if known else None


def _costs(data: dict[str, Any], shape: str) -> list[float]:
    return sorted({r["flops"] for r in _rows(data) if r["shape"] == shape})


def table_models(data: dict[str, Any]) -> Table:
    """shape, cost, configuration, work rate, cores used."""
    return Table(["graph", "flops per tuple", "model", "tuples/s", "cores used"],
                 [[r["shape"], r["flops"], r["config"], rounded(r["tuples_per_s"]), rounded(r["cores_used"])]
                  for r in _rows(data)])


def _order_check(data: dict[str, Any], shape: str, flops: float, higher: str, lower: str,
                 slack: float = 1.0) -> tuple[str, bool | None]:
    hi = _best_dynamic(data, shape, flops) if higher == "dynamic" else _rate(data, shape, flops, higher)
    lo = _best_dynamic(data, shape, flops) if lower == "dynamic" else _rate(data, shape, flops, lower)
    text = f"{shape}, {flops:g} flops: {higher} {_num(hi)} ≥ {lower} {_num(lo)} tuples/s"
    return text, None if hi is None or lo is None else hi >= slack * lo


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def verdict_fig8(data: dict[str, Any]) -> Verdict:
    """Pipeline: dedicated best, manual worst; data parallel: manual best at cost 1, dynamic above dedicated."""
    checks = []
    for flops in _costs(data, "pipeline"):
        checks.append(_order_check(data, "pipeline", flops, "dedicated", "dynamic"))
        checks.append(_order_check(data, "pipeline", flops, "dynamic", "manual"))
    costs = _costs(data, "data-parallel")
    if costs:
        checks.append(_order_check(data, "data-parallel", costs[0], "manual", "dynamic"))
        checks.append(_order_check(data, "data-parallel", costs[-1], "dynamic", "dedicated"))
    return verdict_of(checks)


def verdict_fig9(data: dict[str, Any]) -> Verdict:
    """Mixed graph: dynamic (its best level) at least matches dedicated and manual at every cost."""
    checks = []
    for flops in _costs(data, "mixed"):
        checks.append(_order_check(data, "mixed", flops, "dynamic", "dedicated"))
        checks.append(_order_check(data, "mixed", flops, "dynamic", "manual"))
    return verdict_of(checks)


def plot_models(data: dict[str, Any], path: str, title: str) -> str:
    """Work rate vs cost per tuple, one panel per graph, one line per model."""
    shapes = list(dict.fromkeys(r["shape"] for r in _rows(data)))
    fig, axes = new_axes(len(shapes))
    for ax, shape in zip(axes, shapes):
        costs = _costs(data, shape)
        configs = list(dict.fromkeys(r["config"] for r in _rows(data) if r["shape"] == shape))
        lines(ax, {c: (costs, [_rate(data, shape, f, c) for f in costs]) for c in configs}, "flops per tuple",
              "tuples/s", logx=True)
        ax.set_yscale("log")
        ax.autoscale(axis="y")  # the rates span decades across costs
        ax.set_title(shape)
    return save(fig, path, title)


def figures() -> list[Figure]:
    """IBM Figs. 8–9."""
    return [
        Figure(PAPER, "fig8", "1,000 operators: pure pipeline and pure data parallel",
               "On a 1,000-operator pipeline dedicated beats dynamic and manual is worst; on a 1,000-wide data-"
               "parallel graph manual wins at cost 1 and dynamic beats dedicated at high cost.",
               lambda quick: _run(["pipeline", "data-parallel"], quick), table_models, verdict_fig8,
               lambda d, p: plot_models(d, p, "IBM Fig. 8: 1,000 operators, pipeline and data parallel (GIL held)"),
               SCALE),
        Figure(PAPER, "fig9", "1,000 operators: width 10 × depth 100",
               "On the mixed graph the dynamic model is the best option at every tuple cost; manual is worst.",
               lambda quick: _run(["mixed"], quick), table_models, verdict_fig9,
               lambda d, p: plot_models(d, p, "IBM Fig. 9: 1,000 operators, width 10 × depth 100 (GIL held)"),
               SCALE),
    ]
