"""``elastream bench ordered``: ordered-multicore §7.2–§7.3 experiment shapes on the ordered data structures.

Four sections, each driving :mod:`elastream.ordered` with plain worker
threads (the runtime does not use these structures yet): a worker takes
input, does the per-tuple work, and offers the outputs to a reorder buffer,
keeping refused outputs and retrying them before its next take (it never
blocks on the buffer).

* ``light`` (Fig. 12): a light stateless operator (``SerialQueue`` → workers
  → reorder buffer), throughput vs workers, non-blocking vs lock-based.
* ``pipeline`` (Fig. 13): a selectivity-50 stateless operator whose reorder
  buffer feeds a partitioned operator (hybrid queue, running count per key)
  and its reorder buffer; workers prefer the later operator. Both buffers
  use the scheme under test.
* ``skew`` (Fig. 9): range partitioning of Gaussian keys N(0, σ); hybrid
  queue with fine partitions vs one partition per worker.
* ``latency`` (Fig. 10): mean processing latency (start of processing → the
  output leaves the reorder buffer) vs per-tuple cost, uniform keys.

Per-tuple work is sha256 over a buffer of at least 4 KB sized to the cost;
hashlib releases the GIL for it, so threads can overlap it (GIL case
``release``). The harness itself is Python and holds the GIL.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.bench._common import fmt, machine
from elastream.ops.busy import hash_bytes_per_second
from elastream.ordered import (HashPartitioner, HybridQueue, PartitionedInput, ReorderBuffer, SerialQueue,
                               make_partitioned_input, make_reorder_buffer)

GIL_NOTE = ("GIL case: release — per-tuple work is hashlib.sha256 over a >= 4 KB buffer, which releases the GIL, "
            "so worker threads overlap it on both cores; the harness (taking work, the reorder buffers, the "
            "queues) is Python and holds the GIL.")
SECTIONS = ("light", "pipeline", "skew", "latency")
KEY_SPACE = 1000
MIN_HASH_BYTES = 4096
IDLE_WAIT_S = 0.0001


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench ordered``."""
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4], help="light/pipeline worker counts")
    parser.add_argument("--capacity", type=int, default=1024, help="reorder buffer capacity (slots)")
    parser.add_argument("--budget", type=int, default=4, help="tuples per take of a partitioned input")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of light/pipeline/skew; best is kept")
    parser.add_argument("--light-tuples", type=int, default=20_000)
    parser.add_argument("--light-cost-us", type=float, default=10.0, help="light operator cost per tuple")
    parser.add_argument("--emit-cost-us", type=float, nargs="+", default=[0.0, 5.0],
                        help="light: cost of emitting one output downstream; 0 = a list append (holds the GIL), "
                             ">0 = sha256 work that releases the GIL, like a write to a shared-memory ring")
    parser.add_argument("--pipeline-inputs", type=int, default=300)
    parser.add_argument("--selectivity", type=int, default=50, help="outputs per input of the pipeline's 1st op")
    parser.add_argument("--pipeline-cost-us", type=float, default=100.0, help="pipeline 1st operator cost")
    parser.add_argument("--partitioned-cost-us", type=float, default=10.0, help="pipeline 2nd operator cost")
    parser.add_argument("--pipeline-partitions", type=int, default=16)
    parser.add_argument("--skew-sigmas", type=float, nargs="+", default=[0.01, 0.05, 0.1, 0.25, 0.5, 1.0])
    parser.add_argument("--skew-workers", type=int, default=3,
                        help="workers (= partitions of the baseline); odd, so the centre range is the hot one")
    parser.add_argument("--skew-tuples", type=int, default=6000)
    parser.add_argument("--skew-cost-us", type=float, default=50.0)
    parser.add_argument("--hybrid-partitions", type=int, default=100, help="hybrid partitions in skew/latency")
    parser.add_argument("--latency-costs", type=float, nargs="+", default=[10.0, 100.0, 1000.0])
    parser.add_argument("--latency-workers", type=int, default=2)
    parser.add_argument("--latency-seconds", type=float, default=0.5, help="target CPU seconds per latency run")
    parser.add_argument("--latency-max-tuples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="PNG", default=None, help="draw the four panels")


# --- harness ------------------------------------------------------------------------------------


def make_work(cost_us: float) -> Callable[[], None]:
    """Per-tuple work of about ``cost_us`` µs that releases the GIL (sha256 of >= 4 KB)."""
    if cost_us <= 0:
        return lambda: None
    block = b"\x01" * max(MIN_HASH_BYTES, int(hash_bytes_per_second() * cost_us * 1e-6))
    sha = hashlib.sha256
    return lambda: sha(block).digest()


class Held:
    """One worker's refused outputs, retried lowest serial first (a refusal of the lowest means all refuse)."""

    __slots__ = ("rb", "heap")

    def __init__(self, rb: ReorderBuffer) -> None:
        self.rb = rb
        self.heap: list[tuple[int, Sequence[Any]]] = []

    def offer(self, serial: int, outputs: Sequence[Any]) -> None:
        if not self.rb.try_add(serial, outputs):
            heapq.heappush(self.heap, (serial, outputs))

    def retry(self) -> None:
        heap, rb = self.heap, self.rb
        while heap and rb.try_add(*heap[0]):
            heapq.heappop(heap)

    def __bool__(self) -> bool:
        return bool(self.heap)


class WorkerFailed(Exception):
    """Raised in the surviving workers once one worker has failed, so that every thread ends."""


def run_threads(target: Callable[[int], None], workers: int, stop: threading.Event) -> tuple[float, float]:
    """Run ``target(w)`` on ``workers`` threads; return (wall seconds, cores used = process CPU s / wall s).

    If a worker raises, ``stop`` is set (worker loops check it through :func:`check_stop`) and the first
    error is re-raised here after every thread has joined.
    """
    errors: list[BaseException] = []

    def guarded(w: int) -> None:
        try:
            target(w)
        except WorkerFailed:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised on the benchmark thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(w,), name=f"ordered-bench-{w}") for w in range(workers)]
    c0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if errors:
        raise errors[0]
    return wall, cpu / wall


def check_stop(stop: threading.Event) -> None:
    """Leave a worker loop once another worker has failed."""
    if stop.is_set():
        raise WorkerFailed


def drain_partitioned(inp: PartitionedInput, held: Held, budget: int, w: int,
                      process: Callable[[int, Any, Any], None], stop: threading.Event) -> None:
    """A partitioned operator's worker: take claims until the input is idle, then flush refused outputs."""
    while True:
        check_stop(stop)
        held.retry()
        claim = inp.take(budget, worker=w)
        if claim is None:
            if inp.is_idle():
                break
            time.sleep(IDLE_WAIT_S)
            continue
        try:
            for serial, key, item in claim.items:
                process(serial, key, item)
        finally:
            inp.done(claim.partition)
    held.retry()
    while held:  # the input is drained; wait for the earlier serials other workers still hold
        check_stop(stop)
        time.sleep(IDLE_WAIT_S)
        held.retry()


def check_order(got: list, expected: list, what: str) -> None:
    """The benchmarks double as an end-to-end check: output must equal the sequential run."""
    if got != expected:
        raise RuntimeError(f"{what}: output differs from the sequential run ({len(got)} vs {len(expected)} items)")


# --- Fig. 12: light stateless operator ----------------------------------------------------------


def make_sink(sink: list, emit_cost_us: float) -> Callable[[Sequence[Any]], None]:
    """The downstream send: append to ``sink``, after GIL-releasing work if ``emit_cost_us`` > 0."""
    if emit_cost_us <= 0:
        return sink.extend
    work = make_work(emit_cost_us)

    def emit(outputs: Sequence[Any]) -> None:
        for _ in outputs:
            work()
        sink.extend(outputs)

    return emit


def run_light(scheme: str, workers: int, n: int, work: Callable[[], None], capacity: int,
              emit_cost_us: float) -> dict[str, Any]:
    """Throughput of a light stateless operator behind a reorder buffer of ``scheme``."""
    src: SerialQueue[int] = SerialQueue()
    src.put_many(range(n))
    sink: list[int] = []
    rb = make_reorder_buffer(scheme, capacity, make_sink(sink, emit_cost_us))

    stop = threading.Event()

    def worker(_: int) -> None:
        held = Held(rb)
        while True:
            held.retry()
            got = src.take(1)
            if not got:
                if not held:
                    return
                check_stop(stop)
                time.sleep(0)
                continue
            serial, x = got[0]
            work()
            held.offer(serial, (x,))

    wall, cores = run_threads(worker, workers, stop)
    check_order(sink, list(range(n)), f"light/{scheme}")
    s = rb.statistics()
    return {"scheme": scheme, "workers": workers, "emit_cost_us": emit_cost_us,
            "throughput_tuples_per_s": n / wall, "avg_cost_us": workers * wall / n * 1e6, "cores_used": cores,
            "refused": s.refused, "contended": s.contended, "blocked_s": s.blocked_s,
            "max_occupancy": s.max_occupancy}


# --- Fig. 13: selectivity-50 stateless operator, then a partitioned one -------------------------


def expected_pipeline(n: int, selectivity: int) -> list[tuple[int, int]]:
    """The sequential run of the Fig. 13 pipeline: (key, running count of key) per output."""
    counts = [0] * KEY_SPACE
    out = []
    for x in range(n):
        for j in range(selectivity):
            key = (x * selectivity + j) % KEY_SPACE
            counts[key] += 1
            out.append((key, counts[key]))
    return out


def run_pipeline(scheme: str, workers: int, args: argparse.Namespace, work1: Callable[[], None],
                 work2: Callable[[], None]) -> dict[str, Any]:
    """Fig. 13: stateless (selectivity s) → reorder → hybrid queue → running count per key → reorder."""
    n, sel = args.pipeline_inputs, args.selectivity
    src: SerialQueue[int] = SerialQueue()
    src.put_many(range(n))
    hq = HybridQueue(HashPartitioner(args.pipeline_partitions), args.pipeline_partitions)
    sink: list[tuple[int, int]] = []
    rb2 = make_reorder_buffer(scheme, args.capacity, sink.extend)
    rb1 = make_reorder_buffer(scheme, args.capacity, hq.put_many)  # emit = enqueue downstream, serially
    counts = [0] * KEY_SPACE  # partitioned state: a key is touched by its partition's holder only
    total = n * sel

    def stateful(held2: Held) -> bool:
        claim = hq.take(args.budget)
        if claim is None:
            return False
        try:
            for serial, key, _ in claim.items:
                work2()
                counts[key] += 1
                held2.offer(serial, ((key, counts[key]),))
        finally:
            hq.done(claim.partition)
        return True

    def stateless(held1: Held) -> bool:
        got = src.take(1)
        for serial, x in got:
            work1()
            held1.offer(serial, [((x * sel + j) % KEY_SPACE, x) for j in range(sel)])
        return bool(got)

    stop = threading.Event()

    def worker(_: int) -> None:
        held1, held2 = Held(rb1), Held(rb2)
        while rb2.next_serial < total:
            check_stop(stop)
            held1.retry()
            held2.retry()
            if not (stateful(held2) or stateless(held1)):  # prefer the later operator (LP-like)
                time.sleep(IDLE_WAIT_S)

    wall, cores = run_threads(worker, workers, stop)
    check_order(sink, expected_pipeline(n, sel), f"pipeline/{scheme}")
    s1, s2 = rb1.statistics(), rb2.statistics()
    return {"scheme": scheme, "workers": workers, "throughput_inputs_per_s": n / wall,
            "throughput_outputs_per_s": total / wall, "cores_used": cores,
            "contended": s1.contended + s2.contended, "blocked_s": s1.blocked_s + s2.blocked_s}


# --- Fig. 9 and Fig. 10: partitioning schemes ---------------------------------------------------


def gaussian_keys(n: int, sigma: float, rng: random.Random) -> list[int]:
    """N(0, σ) clipped to [-1, 1], scaled to the key space [0, KEY_SPACE) (§7.2.1)."""
    keys = []
    for _ in range(n):
        x = min(1.0, max(-1.0, rng.gauss(0.0, sigma)))
        keys.append(min(KEY_SPACE - 1, int((x + 1.0) / 2.0 * KEY_SPACE)))
    return keys


def run_partitioned(scheme: str, keys: list[int], workers: int, partitions: int, work: Callable[[], None],
                    args: argparse.Namespace) -> dict[str, Any]:
    """One partitioned operator (range partitioning) → non-blocking reorder buffer, with latencies."""
    n = len(keys)
    inp = make_partitioned_input(scheme, partitions, strategy="range", key_range=(0, KEY_SPACE), workers=workers)
    inp.put_many((k, None) for k in keys)
    started = [0.0] * n
    ended = [0.0] * n

    def emit(outputs: Sequence[int]) -> None:
        t = time.perf_counter()
        for serial in outputs:
            ended[serial] = t

    rb = make_reorder_buffer("nonblocking", args.capacity, emit)
    stop = threading.Event()

    def worker(w: int) -> None:
        held = Held(rb)

        def process(serial: int, key: Any, item: Any) -> None:
            started[serial] = time.perf_counter()
            work()
            held.offer(serial, (serial,))

        drain_partitioned(inp, held, args.budget, w, process, stop)

    wall, cores = run_threads(worker, workers, stop)
    if rb.next_serial != n:
        raise RuntimeError(f"{scheme}: {n - rb.next_serial} outputs never left the reorder buffer")
    return {"scheme": scheme, "partitions": partitions, "throughput_tuples_per_s": n / wall, "cores_used": cores,
            "mean_latency_ms": fmean(e - s for s, e in zip(started, ended)) * 1e3,
            "max_partition_share": inp.statistics().max_partition_share,
            "refused": rb.statistics().refused}


def partitions_for(scheme: str, workers: int, args: argparse.Namespace) -> int:
    """§7.2: the baseline has one partition per worker; the hybrid queue finer ones."""
    return args.hybrid_partitions if scheme == "hybrid" else workers


def run_skew(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fig. 9: throughput of both schemes as σ varies (smaller σ = more skew)."""
    work, rows = make_work(args.skew_cost_us), []
    for sigma in args.skew_sigmas:
        keys = gaussian_keys(args.skew_tuples, sigma, random.Random(args.seed))
        row: dict[str, Any] = {"sigma": sigma}
        _progress(f"skew σ={sigma:g}")
        runs: dict[str, list[dict[str, Any]]] = {"hybrid": [], "partitioned": []}
        for _ in range(max(1, args.repeat)):  # alternate the schemes so load bursts hit both
            for scheme, mine in runs.items():
                mine.append(run_partitioned(scheme, keys, args.skew_workers,
                                            partitions_for(scheme, args.skew_workers, args), work, args))
        for scheme, mine in runs.items():
            row[scheme] = _best(mine, "throughput_tuples_per_s")
        row["hybrid_vs_partitioned_throughput"] = (row["hybrid"]["throughput_tuples_per_s"]
                                                   / row["partitioned"]["throughput_tuples_per_s"])
        rows.append(row)
    return rows


def run_latency(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fig. 10: mean processing latency of both schemes vs per-tuple cost, uniform keys."""
    rows, w = [], args.latency_workers
    for cost in args.latency_costs:
        n = int(min(args.latency_max_tuples, max(100, args.latency_seconds * w / (cost * 1e-6))))
        rng = random.Random(args.seed)
        keys = [rng.randrange(KEY_SPACE) for _ in range(n)]
        work = make_work(cost)
        row: dict[str, Any] = {"cost_us": cost, "tuples": n}
        for scheme in ("hybrid", "partitioned"):
            _progress(f"latency {cost:g} µs: {scheme}")
            row[scheme] = run_partitioned(scheme, keys, w, partitions_for(scheme, w, args), work, args)
        row["hybrid_vs_partitioned_latency"] = (row["hybrid"]["mean_latency_ms"]
                                                / row["partitioned"]["mean_latency_ms"])
        rows.append(row)
    return rows


# --- sweeps and the result ----------------------------------------------------------------------


def _progress(msg: str) -> None:
    print(f"ordered: {msg} …", file=sys.stderr, flush=True)


def _best(rows: list[dict[str, Any]], field: str) -> dict[str, Any]:
    return max(rows, key=lambda r: r[field])


def sweep_schemes(name: str, args: argparse.Namespace, once: Callable[[str, int], dict[str, Any]],
                  field: str) -> list[dict[str, Any]]:
    """Best of ``repeat`` runs per (scheme, workers), with speed-up over the same scheme on 1 worker.

    Repetitions are the outer loop, so a burst of load from other processes
    hits every configuration alike instead of one scheme's runs.
    """
    configs = [(scheme, workers) for scheme in ("nonblocking", "lock") for workers in args.workers]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in configs}
    for i in range(max(1, args.repeat)):
        _progress(f"{name}: repetition {i + 1} of {max(1, args.repeat)}")
        for scheme, workers in configs:
            runs[scheme, workers].append(once(scheme, workers))
    rows = [_best(runs[c], field) for c in configs]
    for r in rows:
        base = next((b[field] for b in rows if b["scheme"] == r["scheme"] and b["workers"] == 1), None)
        r["speedup_vs_1_worker"] = r[field] / base if base else None
    return rows


def scheme_ratio(rows: list[dict[str, Any]], field: str, workers: int = 2) -> float | None:
    """Non-blocking over lock-based ``field`` at ``workers``, or None if not measured."""
    by = {(r["scheme"], r["workers"]): r[field] for r in rows}
    if ("nonblocking", workers) in by and ("lock", workers) in by:
        return by["nonblocking", workers] / by["lock", workers]
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen sections; return the result as a JSON-ready dict."""
    result: dict[str, Any] = {"benchmark": "ordered", "gil": "release", "note": GIL_NOTE,
                              "sections": args.sections, "capacity": args.capacity, "budget": args.budget,
                              "repetitions": args.repeat, "hash_bytes_per_s": hash_bytes_per_second(),
                              "nonblocking_vs_lock_speedup_2_workers": None,
                              "pipeline_nonblocking_vs_lock_speedup_2_workers": None,
                              "hybrid_vs_partitioned_latency_ratio_100us": None}
    if "light" in args.sections:
        work, rows, by_emit = make_work(args.light_cost_us), [], {}
        for emit_cost in args.emit_cost_us:
            part = sweep_schemes(f"light (emit {emit_cost:g} µs)", args,
                                 lambda s, w: run_light(s, w, args.light_tuples, work, args.capacity, emit_cost),
                                 "throughput_tuples_per_s")
            by_emit[f"{emit_cost:g}"] = scheme_ratio(part, "throughput_tuples_per_s")
            rows += part
        result["light"] = {"tuples": args.light_tuples, "cost_us": args.light_cost_us, "results": rows,
                           "nonblocking_vs_lock_speedup_2_workers_by_emit_cost_us": by_emit}
        result["nonblocking_vs_lock_speedup_2_workers"] = by_emit[f"{args.emit_cost_us[0]:g}"]
    if "pipeline" in args.sections:
        w1, w2 = make_work(args.pipeline_cost_us), make_work(args.partitioned_cost_us)
        rows = sweep_schemes("pipeline", args, lambda s, w: run_pipeline(s, w, args, w1, w2),
                             "throughput_inputs_per_s")
        result["pipeline"] = {"inputs": args.pipeline_inputs, "selectivity": args.selectivity,
                              "cost_us": args.pipeline_cost_us, "partitioned_cost_us": args.partitioned_cost_us,
                              "partitions": args.pipeline_partitions, "results": rows}
        result["pipeline_nonblocking_vs_lock_speedup_2_workers"] = scheme_ratio(rows, "throughput_inputs_per_s")
    if "skew" in args.sections:
        result["skew"] = {"workers": args.skew_workers, "tuples": args.skew_tuples, "cost_us": args.skew_cost_us,
                          "hybrid_partitions": args.hybrid_partitions, "results": run_skew(args)}
    if "latency" in args.sections:
        rows = run_latency(args)
        result["latency"] = {"workers": args.latency_workers, "hybrid_partitions": args.hybrid_partitions,
                             "results": rows}
        result["hybrid_vs_partitioned_latency_ratio_100us"] = next(
            (r["hybrid_vs_partitioned_latency"] for r in rows if r["cost_us"] == 100.0), None)
    result["machine"] = machine()
    if args.plot:
        result["plot"] = plot(result, args.plot)
    return result


# --- output -------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: str) -> str:
    """Draw the Fig. 12 / 13 / 9 / 10 shapes that were measured; return ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, section, field in ((axes[0][0], "light", "throughput_tuples_per_s"),
                               (axes[0][1], "pipeline", "throughput_inputs_per_s")):
        rows = result.get(section, {}).get("results", [])
        for line in dict.fromkeys((r["scheme"], r.get("emit_cost_us")) for r in rows):
            mine = [r for r in rows if (r["scheme"], r.get("emit_cost_us")) == line]
            label = line[0] if line[1] is None else f"{line[0]}, emit {line[1]:g} µs"
            ax.plot([r["workers"] for r in mine], [r[field] for r in mine], marker="o", label=label)
        ax.set(xlabel="workers", ylabel=field.replace("_", " "), xticks=sorted({r["workers"] for r in rows}),
               title=f"{section} (Fig. {12 if section == 'light' else 13})")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize="small")
    skew = result.get("skew", {}).get("results", [])
    lat = result.get("latency", {}).get("results", [])
    for scheme in ("hybrid", "partitioned"):
        axes[1][0].plot([r["sigma"] for r in skew], [r[scheme]["throughput_tuples_per_s"] for r in skew],
                        marker="o", label=scheme)
        axes[1][1].plot([r["cost_us"] for r in lat], [r[scheme]["mean_latency_ms"] for r in lat], marker="o",
                        label=scheme)
    axes[1][0].set(xlabel="σ (larger = less skew)", ylabel="tuples/s", title="skew (Fig. 9)", xscale="log")
    axes[1][0].set_ylim(bottom=0)
    axes[1][1].set(xlabel="per-tuple cost (µs)", ylabel="mean latency (ms)", title="latency (Fig. 10)",
                   xscale="log", yscale="log")
    for ax in axes[1]:
        ax.legend(fontsize="small")
    fig.suptitle("ordered data structures, GIL release")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _scheme_table(title: str, rows: list[dict[str, Any]], field: str) -> Table:
    table = Table(title=title)
    for col in ("scheme", "emit µs", "workers", field.replace("_", " "), "speed-up vs 1", "cores used",
                "contended", "blocked s"):
        table.add_column(col, justify="right")
    for r in rows:
        emit = r.get("emit_cost_us")
        table.add_row(r["scheme"], "-" if emit is None else f"{emit:g}", str(r["workers"]), fmt(r[field], 0),
                      fmt(r["speedup_vs_1_worker"], 2), fmt(r["cores_used"], 2), f"{r['contended']:,}",
                      fmt(r["blocked_s"], 3))
    return table


def _partition_table(title: str, rows: list[dict[str, Any]], x: str, ratio: str) -> Table:
    table = Table(title=title)
    for col in (x, "hybrid tuples/s", "partitioned tuples/s", "hybrid ms", "partitioned ms", ratio.replace("_", " "),
                "baseline top share"):
        table.add_column(col, justify="right")
    for r in rows:
        h, p = r["hybrid"], r["partitioned"]
        table.add_row(f"{r[x]:g}", fmt(h["throughput_tuples_per_s"], 0), fmt(p["throughput_tuples_per_s"], 0),
                      fmt(h["mean_latency_ms"], 3), fmt(p["mean_latency_ms"], 3), fmt(r[ratio], 2),
                      fmt(p["max_partition_share"], 2))
    return table


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as rich tables."""
    if "light" in result:
        light = result["light"]
        console.print(_scheme_table(f"Fig. 12 light stateless operator ({light['cost_us']:g} µs, "
                                    f"{light['tuples']:,} tuples)", light["results"], "throughput_tuples_per_s"))
    if "pipeline" in result:
        p = result["pipeline"]
        console.print(_scheme_table(f"Fig. 13 stateless s={p['selectivity']} ({p['cost_us']:g} µs) → partitioned "
                                    f"({p['partitioned_cost_us']:g} µs), {p['inputs']} inputs", p["results"],
                                    "throughput_inputs_per_s"))
    if "skew" in result:
        s = result["skew"]
        console.print(_partition_table(f"Fig. 9 skew: {s['workers']} workers, hybrid {s['hybrid_partitions']} "
                                       f"partitions vs {s['workers']}, {s['cost_us']:g} µs", s["results"],
                                       "sigma", "hybrid_vs_partitioned_throughput"))
    if "latency" in result:
        lat = result["latency"]
        console.print(_partition_table(f"Fig. 10 latency: {lat['workers']} workers, uniform keys", lat["results"],
                                       "cost_us", "hybrid_vs_partitioned_latency"))
    by_emit = result.get("light", {}).get("nonblocking_vs_lock_speedup_2_workers_by_emit_cost_us", {})
    console.print(f"non-blocking vs lock-based at 2 workers: light "
                  f"{fmt(result['nonblocking_vs_lock_speedup_2_workers'], 3)}× "
                  f"(by emit cost µs: {', '.join(f'{k}: {fmt(v, 3)}×' for k, v in by_emit.items())}), pipeline "
                  f"{fmt(result['pipeline_nonblocking_vs_lock_speedup_2_workers'], 3)}×; hybrid / partitioned "
                  f"latency at 100 µs: {fmt(result['hybrid_vs_partitioned_latency_ratio_100us'], 3)}")
    console.print(result["note"])
    console.print(f"load average (1 min) at the end: {result['machine']['load_average_1min']:.2f} — other "
                  "processes may have competed for the cores.")
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")
