"""``elastream bench report``: run the benchmark suite and regenerate the figures in the docs.

Runs ``overhead``, ``topology`` (chain with the GIL held, data-parallel with
it released), ``latency``, ``processes``, ``ipc``, ``keyed``, ``chain`` and ``tpcxbb``
with the parameters below and writes every raw result to
``bench/results/latest.json``. Two blocks between ``<!-- bench:begin -->`` and
``<!-- bench:end -->`` are then rewritten from those results: the README's
gets one headline row per benchmark (the README is a user's manual and stays
short), ``docs/performance.md``'s every table with its command and notes.
Numbers are never typed by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from elastream.bench._common import fmt, machine
from elastream.bench._keyed_defaults import DEFAULT_RUNNERS
from elastream.bench.keyed import paired_from_parts, row_named
from elastream.bench.overhead import DEFAULT_ROW

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench report``."""
    parser.add_argument("--readme", default="README.md", help="README to update with the headlines ('' to skip)")
    parser.add_argument("--performance", default=None,
                        help="page to update with every table (default: docs/performance.md beside the README, "
                             "when it exists; '' to skip)")
    parser.add_argument("--out", default="bench/results/latest.json", help="where the raw results go")
    parser.add_argument("--quick", action="store_true", help="small parameters (for tests)")


def _suite(quick: bool) -> list[tuple[str, list[str]]]:
    if quick:
        return [("overhead", ["--tuples", "20000", "--repeat", "1"]),
                ("topology", ["--topology", "chain", "--threads", "1", "2", "--policy", "random",
                              "--seconds", "1", "--warmup", "0.2", "--cost-us", "50"]),
                ("latency", ["--rate", "1000", "--seconds", "1", "--threads", "1"])]
    return [("overhead", []),
            ("topology", ["--topology", "chain", "--threads", "1", "2", "4", "--policy", "all"]),
            ("topology", ["--topology", "data-parallel", "--threads", "1", "2", "4", "--policy",
                          "least_recently_run", "--gil", "release"]),
            ("latency", ["--rate", "5000", "--seconds", "20", "--threads", "1", "2"]),
            ("processes", []),
            ("ipc", ["--sizes-kb", "10", "40", "320", "--rates", "100", "1000", "3000", "--ring-multiples", "12",
                     "50", "--repeat", "3"]),
            ("keyed", ["--spark", "--bytewax"]),
            ("chain", ["--tuples", "3000", "30000", "--repeat", "3"]),
            ("tpcxbb", ["--scale", "0.05", "--heuristics", "qst", "lp", "et", "ct", "--workers", "1", "2"])]


def _run_one(name: str, argv: list[str]) -> dict[str, Any]:
    from elastream.cli.bench import benchmark_parser

    module = importlib.import_module(f"elastream.bench.{name}")
    result = module.run(benchmark_parser(name, module).parse_args(argv))
    result["command"] = " ".join(["elastream", "bench", name, *argv, "--json"])
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the suite; write the JSON and the README block; return everything."""
    results = [_run_one(name, argv) for name, argv in _suite(args.quick)]
    report = {"benchmark": "report", "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "results": results}
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
        report["written"] = str(out)
    if args.readme:
        update_readme(Path(args.readme), render_summary(report))
        report["readme"] = args.readme
    performance = performance_page(args.readme, args.performance)
    if performance is not None:
        update_readme(performance, render_markdown(report))
        report["performance"] = str(performance)
    return report


def performance_page(readme: str, performance: str | None) -> Path | None:
    """Where the full tables go: ``performance`` if given ('' for nowhere), else docs/performance.md by the README.

    The default is skipped when that page does not exist, so a README written elsewhere (a test's
    temporary one) never touches the project's docs.
    """
    if performance is not None:
        return Path(performance) if performance else None
    if not readme:
        return None
    page = Path(readme).parent / "docs" / "performance.md"
    return page if page.exists() else None


def render_markdown(report: dict[str, Any]) -> str:
    """Markdown tables for every result in ``report``."""
    m = report["machine"]
    parts = [f"Generated {report['generated']} by `elastream bench report` on {m['cpus']} cores, "
             f"Python {m['python']} (load average {m['load_average_1min']:.2f} at the start)."]
    for r in report["results"]:
        parts.append(_RENDERERS[r["benchmark"]](r))
    return "\n\n".join(parts)


def render_summary(report: dict[str, Any]) -> str:
    """One headline row per result in ``report``, for the README (the full tables are in docs/performance.md)."""
    m = report["machine"]
    rows = [[title, text] for title, text in (_HEADLINES.get(r["benchmark"], _table_only)(r)
                                              for r in report["results"])]
    return (f"Generated {report['generated']} by `elastream bench report` on {m['cpus']} cores, Python "
            f"{m['python']} (load average {m['load_average_1min']:.2f} at the start). Every table, with its "
            f"command and what it measures: [docs/performance.md](docs/performance.md).\n\n"
            + _md_table(["benchmark", "headline"], rows, left=2))


def _md_table(header: list[str], rows: list[list[str]], left: int = 0) -> str:
    """A markdown table; the first ``left`` columns are left-aligned, the rest right-aligned."""
    align = ["---" if i < left else "---:" for i in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def _overhead_md(r: dict[str, Any]) -> str:
    table = _md_table(["threads", "engine tuples/s", "plain loop tuples/s", "engine / loop"],
                      [[str(x["threads"]), fmt(x["engine_tuples_per_s"], 0), fmt(x["plain_loop_tuples_per_s"], 0),
                        f"{x['ratio']:.2f}"] for x in r["results"]])
    return (f"**Engine overhead** — `{r['command']}`: {r['functions']} identity Maps over {r['tuples']:,} "
            f"integers vs the fastest plain loop ({r['plain_loop_kind']}). {r['note']}\n\n" + table)


def _topology_md(r: dict[str, Any]) -> str:
    table = _md_table(["policy", "threads", "tuples/s", "mean latency ms", "p99 latency ms", "cores used"],
                      [[x["policy"], str(x["threads"]), fmt(x["throughput_tuples_per_s"], 0), fmt(x["mean_latency_ms"]),
                        fmt(x["p99_latency_ms"]), f"{x['cores_used']:.2f}"] for x in r["results"]], left=1)
    return (f"**Topology {r['topology']}** — `{r['command']}`: {r['busy_operators']} Busy({r['cost_us']:g} µs) "
            f"operators. {r['note']}\n\n" + table)


def _latency_md(r: dict[str, Any]) -> str:
    table = _md_table(["threads", "achieved tuples/s", "p50 ms", "p99 ms", "max ms"],
                      [[str(x["threads"]), fmt(x["achieved_tuples_per_s"], 0), fmt(x["p50_ms"], 3),
                        fmt(x["p99_ms"], 3), fmt(x["max_ms"], 3)] for x in r["results"]])
    return (f"**Latency** — `{r['command']}`: parse → running count per key → format at "
            f"{r['rate']:,.0f} tuples/s. {r['note']}\n\n" + table)


def _processes_md(r: dict[str, Any]) -> str:
    table = _md_table(["processes", "tuples/s", "ideal tuples/s", "fraction of ideal", "speed-up"],
                      [[str(x["processes"]), fmt(x["throughput_tuples_per_s"], 0), fmt(x["ideal_tuples_per_s"], 0),
                        f"{x['fraction_of_ideal']:.3f}", f"{x['speedup_vs_first']:.2f}"] for x in r["results"]])
    hops = r.get("hops")
    hop = (f" A cross-process hop in the engine at {hops['rate']:g} tuples/s adds "
           f"**{hops['one_hop_p50_us']:.0f} µs** at p50 (light flow: {hops['runs']['one process']['p50_us']:.0f} µs "
           f"in one process, {hops['runs']['two hops']['p50_us']:.0f} µs there and back)." if hops else "")
    return (f"**Worker processes** — `{r['command']}`: chain of {r['ops']} Busy({r['cost_us']:g} µs). "
            f"{r['note']}{hop}\n\n" + table)


def _ipc_md(r: dict[str, Any]) -> str:
    rows = []
    for x in r["latency_vs_size"] + r["latency_vs_rate"][1:]:
        rows.append([f"{x['size_kb']}", fmt(x["rate"], 0)]
                    + [f"{fmt(x[t]['p50_us'], 0)} / {fmt(x[t]['p99_us'], 0)}" for t in ("ring", "queue", "tcp")]
                    + [f"{x['ring_vs_queue_p50']:.2f}", f"{x['ring_vs_tcp_p50']:.2f}"]
                    + [" / ".join(f"{x[t].get('consumer_cpu', 0):.0%}" for t in ("ring", "queue", "tcp")),
                       f"{x['ring'].get('poll_hits', 0)}/{x['ring']['n']}"])
    table = _md_table(["size KB", "msg/s", "ring p50 / p99 µs", "Queue p50 / p99 µs", "TCP p50 / p99 µs",
                       "ring/Queue p50", "ring/TCP p50", "consumer CPU ring / Queue / TCP", "ring polls hit"], rows)
    t = r["throughput"]
    summary = r["summary"]
    at40 = (f" At 40 KB and 100 msg/s (the worse of its two measurements) the ring's p50 is "
            f"**{summary['40kb_p50_reduction_vs_queue']:.0%}** below the Queue's and "
            f"**{summary['40kb_p50_reduction_vs_tcp']:.0%}** below TCP's (goal: 50% below both)."
            if "40kb_p50_reduction_vs_tcp" in summary else "")
    return (f"**Shared ring vs multiprocessing.Queue vs TCP loopback** — `{r['command']}`: one-way latency "
            f"(ratio below 1: the ring is faster; the ring's consumer reads in place and, on a steady stream, "
            f"polls a short window around each expected arrival — its CPU share is in the table).{at40} "
            f"Small-tuple throughput, {t['batch']} tuples per record: ring "
            f"{fmt(t['ring_tuples_per_s'], 0)} tuples/s, Queue {fmt(t['queue_tuples_per_s'], 0)} tuples/s, "
            f"ring/Queue **{t['ratio']:.2f}**.\n\n" + table)


def _keyed_md(r: dict[str, Any]) -> str:
    table = _md_table(["configuration", "seconds", "tuples/s", "speed-up vs plain loop", "engine efficiency"],
                      [[x["config"], f"{x['seconds']:.3f}", fmt(x["tuples_per_s"], 0), f"{x['speedup_vs_plain']:.2f}",
                        f"{x['engine_efficiency']:.0%}" if x.get("engine_efficiency") is not None else "-"]
                       for x in r["results"]], left=1)
    ceiling = r.get("two_core_ceiling")
    p2 = row_named(r, "elastream P=2")
    limit = (f" What two cores give this function on this machine in the same run (both pool processes "
             f"burning at once vs one alone, no data): **{ceiling['median']:.2f}×** (median of the "
             f"repetitions, {ceiling['low']:.2f}–{ceiling['high']:.2f}×); elastream P=2 gives "
             f"{p2['speedup_vs_plain'] / ceiling['median']:.0%} of it." if ceiling and p2 else "")
    paired = p2.get("speedup_paired") if p2 is not None else None
    if paired is not None:
        limit += (f" Paired by repetition (each P=2 run over the plain loop timed just before it): median "
                  f"{paired['median']:.2f}× ({paired['low']:.2f}–{paired['high']:.2f}×).")
    if p2 is not None and p2.get("engine_efficiency") is not None:
        limit += (f" Engine efficiency (the seconds the per-tuple function ran over processes × wall-clock "
                  f"seconds; the rest is elastream's routing, merging, moving tuples between processes, "
                  f"scheduling, idle time and the start): {p2['engine_efficiency']:.0%} at P=2.")
    losses = p2.get("engine_losses") if p2 is not None else None
    if losses is not None:
        limit += (f" Of the {p2['processes'] * p2['seconds']:.2f} core-seconds of that run the function missed "
                  f"{losses['lost_s']:.2f}: elastream's own operators {losses['own_work_s']:.2f}, idle "
                  f"{losses['idle_s']:.2f}, before start / after end {losses['not_alive_s']:.2f}, between "
                  f"activations {losses['between_s']:.2f}.")
    slowdown = p2.get("function_slowdown") if p2 is not None else None
    if slowdown is not None:
        hand = (row_named(r, "hand-split") or {}).get("function_slowdown")
        limit += (f" Per tuple, the function itself took {slowdown['best_run']:.2f}× the plain loop's time in that "
                  f"run (median of the runs {slowdown['median']:.2f}×"
                  + (f"; the hand-split's workers, both cores busy without elastream: median {hand['median']:.2f}×"
                     if hand else "")
                  + f"), so that run gave {p2['processes']} × {p2['engine_efficiency']:.0%} ÷ {slowdown['best_run']:.2f} = "
                  f"{paired_from_parts(p2):.2f}× the plain loop timed just before it.")
    bytewax = row_named(r, "Bytewax")
    if bytewax is not None:
        limit += (f" Bytewax on two processes (`input`, `key_on`, `stateful_map`; it keeps each key's order only, "
                  f"so the outputs are put in input order after the run, untimed, and checked equal): "
                  f"{bytewax['speedup_vs_plain']:.2f}× the plain loop"
                  + (f"; elastream P=2 is **{bytewax['seconds'] / p2['seconds']:.2f}×** faster." if p2 else "."))
    spark = row_named(r, "Spark ")
    if spark is not None:
        settings = r.get("spark") or {}
        limit += (f" Spark Structured Streaming on the same job ({settings.get('master', '?')}, "
                  f"`groupBy(key).applyInPandasWithState` keeping each key's sum in the group state, "
                  f"{settings.get('micro_batches', '?')} micro-batches, outputs checked equal): "
                  f"{spark['speedup_vs_plain']:.2f}× the plain loop"
                  + (f"; elastream P=2 is **{spark['seconds'] / p2['seconds']:.1f}×** faster." if p2 else "."))
    return (f"**Keyed running sum** — `{r['command']}`: {r['tuples']:,} tuples, {r['keys']:,} keys, about "
            f"{r['cost_us']:g} µs of pure Python per tuple, ordered output checked against the plain loop "
            f"(goal: P=2 ≥ {r['goal_speedup_p2']}×). {r['note']}{limit}\n\n" + table)


def _tpcxbb_md(r: dict[str, Any]) -> str:
    rows = []
    for x in r["queries"]:
        local, spark = x.get("local"), x.get("spark-streaming")
        rows.append([x["query"], fmt(local["tuples_per_second"], 0) if local else "-",
                     f"{fmt(local['p50_ms'], 2)} / {fmt(local['p99_ms'], 2)}" if local else "-",
                     fmt(spark["tuples_per_second"], 0) if spark else "-",
                     f"{fmt(spark['p50_ms'], 0)} / {fmt(spark['p99_ms'], 0)}" if spark else "-",
                     fmt(x.get("throughput_ratio"), 1), fmt(x.get("p99_ratio"), 0),
                     "yes" if all(e["match"] for e in (local, spark) if e) else "no"])
    table = _md_table(["query", "elastream tuples/s", "elastream p50 / p99 ms", "Spark SS tuples/s",
                       "Spark SS p50 / p99 ms", "throughput ×", "p99 ×", "answers = Spark SQL"], rows, left=1)
    opts = r["local_options"]
    return (f"**TPCx-BB streaming queries, elastream vs Spark Structured Streaming** — `{r['command']}`: scale "
            f"{r['scale']:g}, elastream with {opts['threads']} threads, {opts['processes']} process, policy "
            f"{opts['policy']}; Spark local[*]. Goals: throughput ≥ 3×, p99 latency ≥ 100× lower. "
            f"{r['note']}\n\n" + table + _heuristics_md(r["heuristics"]))


def _heuristics_md(points: list[dict[str, Any]]) -> str:
    if not points:
        return ""
    threads = sorted({p["threads"] for p in points})
    rows = []
    for query, policy in sorted({(p["query"], p["policy"]) for p in points}):
        by = {p["threads"]: p for p in points if p["query"] == query and p["policy"] == policy}
        rows.append([query, policy] + [f"{fmt(by[t]['tuples_per_second'], 0)} ({fmt(by[t]['p99_ms'], 1)})"
                                       if t in by else "-" for t in threads])
    table = _md_table(["query", "policy", *(f"{t} threads: tuples/s (p99 ms)" for t in threads)], rows, left=2)
    return "\n\nelastream vs worker threads for the ordered-multicore heuristics (Fig. 8 shape):\n\n" + table


def _chain_md(r: dict[str, Any]) -> str:
    rows = [[f"{job['tuples']:,}", x["config"], f"{x['seconds']:.2f}",
             fmt(x["share_of_2core_ideal"], 3) if x["share_of_2core_ideal"] is not None else "-"]
            for job in r["jobs"] for x in job["rows"]]
    table = _md_table(["tuples", "configuration", "median seconds", "share of the 2-core ideal"], rows, left=2)
    return (f"**Fixed-size chain job** — `{r['command']}`: source → {r['ops']} maps of {r['cost_us']:g} µs "
            f"of pure Python → Collect, each runner as a user writes it, {r['repeat']} interleaved runs (medians); the "
            f"2-core ideal is half the plain loop's time. {r['note']}\n\n" + table)


_RENDERERS = {"overhead": _overhead_md, "topology": _topology_md, "latency": _latency_md,
              "processes": _processes_md, "ipc": _ipc_md, "keyed": _keyed_md, "tpcxbb": _tpcxbb_md,
              "chain": _chain_md}


def _best_by_threads(rows: list[dict[str, Any]]) -> str:
    """'a / b / c tuples/s at 1 / 2 / 4 threads': each thread count's best throughput over the policies."""
    threads = sorted({x["threads"] for x in rows})
    best = [max(x["throughput_tuples_per_s"] for x in rows if x["threads"] == t) for t in threads]
    cores = max(x["cores_used"] for x in rows)
    return (f"{' / '.join(fmt(b, 0) for b in best)} tuples/s at {' / '.join(map(str, threads))} threads "
            f"(best policy each; at most {cores:.2f} cores used)")


def _overhead_headline(r: dict[str, Any]) -> tuple[str, str]:
    one = r["results"][0]
    plain = _row_where(r["results"], "threads", DEFAULT_ROW)
    default = f"; plain `Runner()` {plain['ratio']:.2f}×" if plain else ""
    return ("Engine overhead", f"{r['functions']} identity Maps at {one['threads']} thread: "
            f"{one['ratio']:.2f}× the plain loop's tuples/s ({fmt(one['engine_tuples_per_s'], 0)} vs "
            f"{fmt(one['plain_loop_tuples_per_s'], 0)}){default}")


def _row_where(rows: list[dict[str, Any]], key: str, value: Any) -> dict[str, Any] | None:
    """The first row whose ``key`` is ``value`` (a default runner's row), or None."""
    return next((x for x in rows if x.get(key) == value), None)


def _topology_headline(r: dict[str, Any]) -> tuple[str, str]:
    gil = {"hold": "held", "release": "released"}.get(r["gil"], r["gil"])
    return (f"Topology {r['topology']}, GIL {gil}",
            f"{r['busy_operators']} Busy({r['cost_us']:g} µs): {_best_by_threads(r['results'])}")


def _latency_headline(r: dict[str, Any]) -> tuple[str, str]:
    one = r["results"][0]
    plain = _row_where(r["results"], "threads", DEFAULT_ROW)
    default = f"; plain `Runner()` p99 {fmt(plain['p99_ms'], 3)} ms" if plain else ""
    return ("Latency", f"at {r['rate']:,.0f} tuples/s on {one['threads']} thread: p50 {fmt(one['p50_ms'], 3)} ms, "
            f"p99 {fmt(one['p99_ms'], 3)} ms{default}")


def _processes_headline(r: dict[str, Any]) -> tuple[str, str]:
    last = r["results"][-1]
    hops = r.get("hops")
    hop = f"; a hop between processes adds {hops['one_hop_p50_us']:.0f} µs at p50" if hops else ""
    return ("Worker processes", f"{r['ops']} Busy({r['cost_us']:g} µs), GIL held: {last['processes']} processes "
            f"give {last['speedup_vs_first']:.2f}× one ({last['fraction_of_ideal']:.0%} of ideal){hop}")


def _ipc_headline(r: dict[str, Any]) -> tuple[str, str]:
    s = r["summary"]
    at40 = (f"40 KB at 100 msg/s: ring p50 {s['40kb_p50_reduction_vs_queue']:.0%} below "
            f"multiprocessing.Queue, {s['40kb_p50_reduction_vs_tcp']:.0%} below TCP; "
            if "40kb_p50_reduction_vs_tcp" in s else "")
    return ("Shared ring", f"{at40}small tuples: ring/Queue throughput {r['throughput']['ratio']:.2f}")


def _keyed_headline(r: dict[str, Any]) -> tuple[str, str]:
    p2 = row_named(r, "elastream P=2")
    if p2 is None:
        return ("Keyed running sum", "no P=2 row")
    text = f"P=2: {p2['speedup_vs_plain']:.2f}× the plain loop"
    if p2.get("engine_efficiency") is not None:
        text += f" (engine efficiency {p2['engine_efficiency']:.0%})"
    defaults = [x for x in (row_named(r, label) for label in DEFAULT_RUNNERS) if x is not None]
    if defaults:
        text += "; as written, " + ", ".join(f"`{x['config']}` {x['speedup_vs_plain']:.2f}×" for x in defaults)
    for label, prefix in (("Bytewax", "Bytewax"), ("Spark Structured Streaming", "Spark ")):
        other = row_named(r, prefix)
        if other is not None:
            text += f"; {other['seconds'] / p2['seconds']:.2f}× as fast as {label}"
    return ("Keyed running sum", text)


def _chain_headline(r: dict[str, Any]) -> tuple[str, str]:
    parts = []
    for job in r["jobs"]:
        shares = [f"`{x['config']}` {x['share_of_2core_ideal']:.2f}" for x in job["rows"]
                  if x["config"] in DEFAULT_RUNNERS]
        parts.append(f"{job['tuples']:,} tuples: " + ", ".join(shares))
    return ("Fixed-size chain job", f"{r['ops']} × {r['cost_us']:g} µs, GIL held, share of the 2-core ideal — "
            + "; ".join(parts))


def _tpcxbb_headline(r: dict[str, Any]) -> tuple[str, str]:
    s = r["summary"]
    matched = sum(all(e["match"] for e in (x.get("local"), x.get("spark-streaming")) if e) for x in r["queries"])
    return ("TPCx-BB queries vs Spark SS", f"throughput ≥ {s['min_throughput_ratio']:.1f}×, p99 latency ≥ "
            f"{s['min_p99_ratio']:,.0f}× lower; answers equal Spark SQL's in {matched} of {len(r['queries'])}")


def _table_only(r: dict[str, Any]) -> tuple[str, str]:
    # A benchmark without a headline of its own still shows in the README, pointing to its table.
    return (r["benchmark"], "see its table in docs/performance.md")


#: One headline per benchmark for the README; a new benchmark adds one here beside its entry in _RENDERERS.
_HEADLINES = {"overhead": _overhead_headline, "topology": _topology_headline, "latency": _latency_headline,
              "processes": _processes_headline, "ipc": _ipc_headline, "keyed": _keyed_headline,
              "tpcxbb": _tpcxbb_headline, "chain": _chain_headline}


def update_readme(path: Path, block: str) -> None:
    """Replace the text between the bench markers of ``path`` (the README or a docs page) with ``block``."""
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to update")
    path.write_text(pattern.sub(lambda _: f"{BEGIN}\n{block}\n{END}", text))


def print_report(result: dict[str, Any], console: Console) -> None:
    """Print the generated markdown."""
    console.print(render_markdown(result), markup=False, highlight=False)
    if result.get("written"):
        console.print(f"raw results: {result['written']}")
