"""``elastream bench report``: run the benchmark suite and regenerate the README figures.

Runs ``overhead``, ``topology`` (chain with the GIL held, data-parallel with
it released), ``latency`` and ``processes`` with the parameters below, writes every raw result to
``bench/results/latest.json`` and replaces the block between
``<!-- bench:begin -->`` and ``<!-- bench:end -->`` in the README with tables
generated from those results. Numbers are never typed by hand.
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

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench report``."""
    parser.add_argument("--readme", default="README.md", help="README to update ('' to skip)")
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
            ("processes", [])]


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
        update_readme(Path(args.readme), render_markdown(report))
        report["readme"] = args.readme
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """Markdown tables for every result in ``report``."""
    m = report["machine"]
    parts = [f"Generated {report['generated']} by `elastream bench report` on {m['cpus']} cores, "
             f"Python {m['python']} (load average {m['load_average_1min']:.2f} at the start)."]
    for r in report["results"]:
        parts.append(_RENDERERS[r["benchmark"]](r))
    return "\n\n".join(parts)


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
    return (f"**Worker processes** — `{r['command']}`: chain of {r['ops']} Busy({r['cost_us']:g} µs). "
            f"{r['note']}\n\n" + table)


_RENDERERS = {"overhead": _overhead_md, "topology": _topology_md, "latency": _latency_md,
              "processes": _processes_md}


def update_readme(path: Path, block: str) -> None:
    """Replace the text between the bench markers of ``path`` with ``block``."""
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
