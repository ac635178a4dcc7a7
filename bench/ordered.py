"""``elastream bench ordered``: ordered-multicore §7 experiment shapes, on the data structures and on the engine.

Two families of sections.

**Data structures** (``light``, ``pipeline``, ``skew``, ``latency``) drive
:mod:`elastream.ordered` directly with plain worker threads: a worker takes
input, does the per-tuple work, and offers the outputs to a reorder buffer,
keeping refused outputs and retrying them before its next take (it never
blocks on the buffer). They isolate the structures from the scheduler.

* ``light`` (Fig. 12): a light stateless operator (``SerialQueue`` → workers
  → reorder buffer), throughput vs workers, non-blocking vs lock-based.
* ``pipeline`` (Fig. 13): a selectivity-50 stateless operator whose reorder
  buffer feeds a partitioned operator (hybrid queue, running count per key)
  and its reorder buffer; workers prefer the later operator.
* ``skew`` (Fig. 9): range partitioning of Gaussian keys N(0, σ); hybrid
  queue with fine partitions vs one partition per worker.
* ``latency`` (Fig. 10): mean processing latency (start of processing → the
  output leaves the reorder buffer) vs per-tuple cost, uniform keys.

**Engine** (``engine-light``, ``engine-pipeline``, ``engine-skew``,
``engine-latency``, ``heuristics``) run the same shapes as ``es.Flow`` +
``es.Runner``, where dynamic allotment (:mod:`elastream.runtime.allotment`)
puts several workers on a stateless or partitioned operator and the reorder
buffer restores order; ``heuristics`` (Fig. 8) compares the §6 scheduling
policies on a four-operator pipeline. Every engine run is checked against
the sequential run of the same logic (see :mod:`elastream.bench._ordered_engine`).

Per-tuple work is sha256 over a buffer of at least 4 KB sized to the cost;
hashlib releases the GIL for it, so threads can overlap it (GIL case
``release``). The harness and the engine are Python and hold the GIL.
``--quick`` shrinks every section to a smoke test (for the tests; its numbers
mean little).
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

from rich.console import Console
from rich.table import Table

from elastream.bench._common import fmt, machine
from elastream.bench._ordered_common import (KEY_SPACE, best, check_order, expected_pipeline, explode_key,
                                             gaussian_keys, make_work, progress)
from elastream.bench._ordered_engine import ENGINE_GIL_NOTE, ENGINE_SECTIONS, HEURISTIC_POLICIES, RUNNERS
from elastream.ops.busy import hash_bytes_per_second
from elastream.policies import available as available_policies
from elastream.ordered import (HashPartitioner, HybridQueue, PartitionedInput, ReorderBuffer, SerialQueue,
                               make_partitioned_input, make_reorder_buffer)

GIL_NOTE = ("GIL case: release — per-tuple work is hashlib.sha256 over a >= 4 KB buffer, which releases the GIL, "
            "so worker threads overlap it on both cores; the harness (taking work, the reorder buffers, the "
            "queues) is Python and holds the GIL.")
STRUCTURE_SECTIONS = ("light", "pipeline", "skew", "latency")
SECTIONS = STRUCTURE_SECTIONS + ENGINE_SECTIONS
IDLE_WAIT_S = 0.0001

#: Option defaults of a full run, and the smaller ones ``--quick`` uses instead (None: same as full).
FULL: dict[str, Any] = {
    "workers": [1, 2, 3, 4], "repeat": 3, "light_tuples": 20_000, "emit_cost_us": [0.0, 5.0],
    "pipeline_inputs": 300, "skew_sigmas": [0.01, 0.05, 0.1, 0.25, 0.5, 1.0], "skew_tuples": 6000,
    "latency_costs": [10.0, 100.0, 1000.0], "latency_seconds": 0.5, "latency_max_tuples": 20_000,
    "engine_threads": [1, 2, 3, 4], "engine_repeat": 2, "engine_light_tuples": 30_000,
    "engine_light_batch_sizes": [1, 64], "engine_pipeline_batch_size": 64,
    "engine_latency_batch_sizes": [32, 256],
    "engine_pipeline_inputs": 400, "engine_skew_tuples": 6000, "heuristics_threads": [1, 2, 4],
    "heuristics_inputs": 6000, "run_timeout": 120.0,
}
QUICK: dict[str, Any] = {
    "workers": [1, 2], "repeat": 1, "light_tuples": 2000, "emit_cost_us": [0.0], "pipeline_inputs": 40,
    "skew_sigmas": [0.05, 1.0], "skew_tuples": 600, "latency_costs": [100.0], "latency_seconds": 0.05,
    "latency_max_tuples": 1000, "engine_threads": [1, 2], "engine_repeat": 1, "engine_light_tuples": 2000,
    "engine_light_batch_sizes": [8], "engine_pipeline_batch_size": 8, "engine_latency_batch_sizes": [32],
    "engine_pipeline_inputs": 40, "engine_skew_tuples": 600, "heuristics_threads": [1, 2],
    "heuristics_inputs": 600, "run_timeout": 60.0,
}


def _sized(parser: argparse.ArgumentParser, name: str, kind: type, help_text: str, many: bool = False) -> None:
    """An option whose default depends on ``--quick`` (resolved by :func:`resolve`)."""
    key = name.lstrip("-").replace("-", "_")
    parser.add_argument(name, type=kind, nargs="+" if many else None, default=None,
                        help=f"{help_text} (default {FULL[key]}; --quick {QUICK.get(key, FULL[key])})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench ordered``."""
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition: a smoke test")
    _sized(parser, "--workers", int, "data-structure light/pipeline worker counts", many=True)
    parser.add_argument("--capacity", type=int, default=1024, help="reorder buffer capacity (slots)")
    parser.add_argument("--budget", type=int, default=4, help="tuples per take of a partitioned input")
    _sized(parser, "--repeat", int, "repetitions of the data-structure light/pipeline/skew runs; best is kept")
    _sized(parser, "--light-tuples", int, "data-structure light: tuples")
    parser.add_argument("--light-cost-us", type=float, default=10.0, help="light operator cost per tuple")
    _sized(parser, "--emit-cost-us", float, "data-structure light: cost of emitting one output downstream; 0 = "
           "a list append (holds the GIL), >0 = sha256 work that releases the GIL, like a ring write", many=True)
    _sized(parser, "--pipeline-inputs", int, "data-structure pipeline: inputs")
    parser.add_argument("--selectivity", type=int, default=50, help="outputs per input of the pipeline's 1st op")
    parser.add_argument("--pipeline-cost-us", type=float, default=100.0, help="pipeline 1st operator cost")
    parser.add_argument("--partitioned-cost-us", type=float, default=10.0, help="pipeline 2nd operator cost")
    parser.add_argument("--pipeline-partitions", type=int, default=16)
    _sized(parser, "--skew-sigmas", float, "skew: σ values of the Gaussian keys", many=True)
    parser.add_argument("--skew-workers", type=int, default=3,
                        help="skew workers/threads (= partitions of the baseline); odd, so the centre range is hot")
    _sized(parser, "--skew-tuples", int, "data-structure skew: tuples")
    parser.add_argument("--skew-cost-us", type=float, default=50.0)
    parser.add_argument("--hybrid-partitions", type=int, default=100, help="hybrid partitions in skew/latency")
    _sized(parser, "--latency-costs", float, "latency: per-tuple costs (µs)", many=True)
    parser.add_argument("--latency-workers", type=int, default=2, help="latency workers/threads")
    _sized(parser, "--latency-seconds", float, "latency: target CPU seconds per run")
    _sized(parser, "--latency-max-tuples", int, "latency: most tuples per run")
    _sized(parser, "--engine-threads", int, "engine-light/pipeline thread counts", many=True)
    _sized(parser, "--engine-repeat", int, "repetitions of every engine run (best throughput / median latency)")
    _sized(parser, "--engine-light-tuples", int, "engine-light: tuples")
    _sized(parser, "--engine-light-batch-sizes", int, "engine-light: Runner batch sizes (one serial per batch; the "
           "first gives the headline ratio)", many=True)
    _sized(parser, "--engine-pipeline-inputs", int, "engine-pipeline: inputs")
    _sized(parser, "--engine-pipeline-batch-size", int, "engine-pipeline: Runner batch size")
    _sized(parser, "--engine-latency-batch-sizes", int, "engine-latency: Runner batch sizes, port queues of 4 "
           "batches (the first gives the headline ratio)", many=True)
    _sized(parser, "--engine-skew-tuples", int, "engine-skew: tuples")
    parser.add_argument("--engine-batch-size", type=int, default=256,
                        help="Runner(batch_size=) of engine-skew and heuristics runs")
    parser.add_argument("--engine-queue-size", type=int, default=1024,
                        help="Runner(max_queue_size=) of engine runs (engine-latency: 4 batches)")
    parser.add_argument("--policies", nargs="+", default=list(HEURISTIC_POLICIES), choices=available_policies(),
                        metavar="POLICY", help="heuristics: policies (default: %(default)s)")
    _sized(parser, "--heuristics-threads", int, "heuristics: thread counts", many=True)
    _sized(parser, "--heuristics-inputs", int, "heuristics: source tuples")
    parser.add_argument("--heuristics-costs-us", type=float, nargs=4, default=[20.0, 10.0, 10.0, 5.0],
                        metavar=("PARSE", "EXPLODE", "COUNT", "FILTER"), help="heuristics: per-tuple stage costs")
    parser.add_argument("--heuristics-partitions", type=int, default=16, help="heuristics: count partitions")
    _sized(parser, "--run-timeout", float, "seconds an engine run may take before it counts as a hang")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="PNG", default=None, help="draw a panel per measured section")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left unset with the full-run or ``--quick`` defaults; returns ``args``."""
    for key, full in FULL.items():
        if getattr(args, key, None) is None:
            setattr(args, key, QUICK.get(key, full) if args.quick else full)
    return args


# --- harness ------------------------------------------------------------------------------------


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
            held1.offer(serial, [(explode_key(x, j, sel), x) for j in range(sel)])
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
        progress(f"skew σ={sigma:g}")
        runs: dict[str, list[dict[str, Any]]] = {"hybrid": [], "partitioned": []}
        for _ in range(max(1, args.repeat)):  # alternate the schemes so load bursts hit both
            for scheme, mine in runs.items():
                mine.append(run_partitioned(scheme, keys, args.skew_workers,
                                            partitions_for(scheme, args.skew_workers, args), work, args))
        for scheme, mine in runs.items():
            row[scheme] = best(mine, "throughput_tuples_per_s")
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
            progress(f"latency {cost:g} µs: {scheme}")
            row[scheme] = run_partitioned(scheme, keys, w, partitions_for(scheme, w, args), work, args)
        row["hybrid_vs_partitioned_latency"] = (row["hybrid"]["mean_latency_ms"]
                                                / row["partitioned"]["mean_latency_ms"])
        rows.append(row)
    return rows


# --- sweeps and the result ----------------------------------------------------------------------


def sweep_schemes(name: str, args: argparse.Namespace, once: Callable[[str, int], dict[str, Any]],
                  field: str) -> list[dict[str, Any]]:
    """Best of ``repeat`` runs per (scheme, workers), with speed-up over the same scheme on 1 worker.

    Repetitions are the outer loop, so a burst of load from other processes
    hits every configuration alike instead of one scheme's runs.
    """
    configs = [(scheme, workers) for scheme in ("nonblocking", "lock") for workers in args.workers]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in configs}
    for i in range(max(1, args.repeat)):
        progress(f"{name}: repetition {i + 1} of {max(1, args.repeat)}")
        for scheme, workers in configs:
            runs[scheme, workers].append(once(scheme, workers))
    rows = [best(runs[c], field) for c in configs]
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


def run_structures(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The data-structure sections chosen in ``args``, added to ``result``."""
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


def run_engine(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The engine sections chosen in ``args``, added to ``result`` (each run order-checked)."""
    for section in ENGINE_SECTIONS:
        if section in args.sections:
            progress(section)
            result[section] = RUNNERS[section](args)
    result["engine_nonblocking_vs_lock_speedup_2_threads"] = result.get("engine-light", {}).get(
        "nonblocking_vs_lock_speedup_2_threads")
    result["engine_pipeline_nonblocking_vs_lock_speedup_2_threads"] = result.get("engine-pipeline", {}).get(
        "nonblocking_vs_lock_speedup_2_threads")
    result["engine_hybrid_vs_partitioned_latency_ratio_100us"] = result.get("engine-latency", {}).get(
        "hybrid_vs_partitioned_latency_ratio_100us")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen sections; return the result as a JSON-ready dict."""
    resolve(args)
    result: dict[str, Any] = {"benchmark": "ordered", "gil": "release", "note": GIL_NOTE,
                              "engine_note": ENGINE_GIL_NOTE, "quick": args.quick, "sections": args.sections,
                              "capacity": args.capacity, "budget": args.budget, "repetitions": args.repeat,
                              "engine_repetitions": args.engine_repeat, "hash_bytes_per_s": hash_bytes_per_second(),
                              "load_average_1min_start": os.getloadavg()[0],
                              "nonblocking_vs_lock_speedup_2_workers": None,
                              "pipeline_nonblocking_vs_lock_speedup_2_workers": None,
                              "hybrid_vs_partitioned_latency_ratio_100us": None}
    run_structures(args, result)
    run_engine(args, result)
    result["machine"] = machine()
    if args.plot:
        from elastream.bench._ordered_plot import plot

        result["plot"] = plot(result, args.plot)
    return result


# --- output -------------------------------------------------------------------------------------


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


def _engine_scheme_table(title: str, rows: list[dict[str, Any]], field: str) -> Table:
    table = Table(title=title)
    for col in ("batch", "scheme", "threads", field.replace("_", " "), "speed-up vs 1", "avg cost µs", "cores used",
                "contended", "blocked s", "order"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["batch_size"]), r["scheme"], str(r["threads"]), fmt(r[field], 0),
                      fmt(r["speedup_vs_1_thread"], 2),
                      fmt(r.get("avg_cost_us"), 1), fmt(r["cores_used"], 2), f"{r['contended']:,}",
                      fmt(r["blocked_s"], 3), "ok" if r["verified"] else "WRONG")
    return table


def _engine_partition_table(title: str, rows: list[dict[str, Any]], x: str, ratio: str, latency: bool) -> Table:
    table = Table(title=title)
    cols = ["batch", x, "hybrid tuples/s", "partitioned tuples/s"]
    cols += ["hybrid mean ms", "partitioned mean ms", "hybrid p99 ms", "partitioned p99 ms"] if latency else \
        ["hybrid avg cost µs", "partitioned avg cost µs"]
    for col in (*cols, ratio.replace("_", " "), "baseline top share", "order"):
        table.add_column(col, justify="right")
    for r in rows:
        h, p = r["hybrid"], r["partitioned"]
        cells = [str(h["batch_size"]), f"{r[x]:g}", fmt(h["throughput_tuples_per_s"], 0),
                 fmt(p["throughput_tuples_per_s"], 0)]
        if latency:
            hl, pl = h["latency"] or {}, p["latency"] or {}
            cells += [fmt(hl.get("mean_ms"), 3), fmt(pl.get("mean_ms"), 3), fmt(hl.get("p99_ms"), 3),
                      fmt(pl.get("p99_ms"), 3)]
        else:
            cells += [fmt(h.get("avg_cost_us"), 1), fmt(p.get("avg_cost_us"), 1)]
        ok = h["verified"] and p["verified"]
        table.add_row(*cells, fmt(r[ratio], 2), fmt(p["max_partition_share"], 2), "ok" if ok else "WRONG")
    return table


def _heuristics_table(h: dict[str, Any]) -> Table:
    costs = ", ".join(f"{k} {v:g} µs" for k, v in h["costs_us"].items())
    table = Table(title=f"Fig. 8 heuristics: parse → explode (s=2) → count ({h['partitions']} partitions) → "
                        f"even (s=0.5); {costs}; {h['inputs']:,} inputs")
    for col in ("policy", "threads", "inputs/s", "outputs/s", "p50 ms", "p99 ms", "mean ms", "cores used", "order"):
        table.add_column(col, justify="right")
    for r in h["results"]:
        lat = r["latency"] or {}
        table.add_row(r["policy"], str(r["threads"]), fmt(r["throughput_inputs_per_s"], 0),
                      fmt(r["throughput_tuples_per_s"], 0), fmt(lat.get("p50_ms"), 2), fmt(lat.get("p99_ms"), 2),
                      fmt(lat.get("mean_ms"), 2), fmt(r["cores_used"], 2), "ok" if r["verified"] else "WRONG")
    return table


def print_structures(result: dict[str, Any], console: Console) -> None:
    """The data-structure sections' tables."""
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
    if any(s in result for s in STRUCTURE_SECTIONS):
        parts = []
        if "light" in result:
            by_emit = result["light"]["nonblocking_vs_lock_speedup_2_workers_by_emit_cost_us"]
            parts.append(f"non-blocking vs lock-based at 2 workers, light: "
                         f"{fmt(result['nonblocking_vs_lock_speedup_2_workers'], 3)}× (by emit cost µs: "
                         f"{', '.join(f'{k}: {fmt(v, 3)}×' for k, v in by_emit.items())})")
        if "pipeline" in result:
            parts.append(f"pipeline: {fmt(result['pipeline_nonblocking_vs_lock_speedup_2_workers'], 3)}×")
        if "latency" in result:
            parts.append(f"hybrid / partitioned latency at 100 µs: "
                         f"{fmt(result['hybrid_vs_partitioned_latency_ratio_100us'], 3)}")
        console.print("data structures — " + "; ".join(parts))
        console.print(result["note"])


def print_engine(result: dict[str, Any], console: Console) -> None:
    """The engine sections' tables."""
    if "engine-light" in result:
        e = result["engine-light"]
        console.print(_engine_scheme_table(
            f"engine Fig. 12: source → map ({e['cost_us']:g} µs) → sink, {e['tuples']:,} tuples "
            f"(plain loop {fmt(e['plain_loop_tuples_per_s'], 0)} tuples/s)", e["results"], "throughput_tuples_per_s"))
    if "engine-pipeline" in result:
        p = result["engine-pipeline"]
        console.print(_engine_scheme_table(
            f"engine Fig. 13: flat_map s={p['selectivity']} ({p['cost_us']:g} µs) → key_by(partitions="
            f"{p['partitions']}).process count ({p['partitioned_cost_us']:g} µs), {p['inputs']} inputs",
            p["results"], "throughput_inputs_per_s"))
    if "engine-skew" in result:
        s = result["engine-skew"]
        console.print(_engine_partition_table(
            f"engine Fig. 9 skew: {s['threads']} threads, hybrid {s['hybrid_partitions']} partitions vs "
            f"{s['threads']}, {s['cost_us']:g} µs, {s['tuples']:,} tuples", s["results"], "sigma",
            "hybrid_vs_partitioned_throughput", latency=False))
    if "engine-latency" in result:
        lat = result["engine-latency"]
        console.print(_engine_partition_table(
            f"engine Fig. 10 latency (start of processing → sink): {lat['threads']} threads, uniform keys, port "
            f"queues of {lat['queue_batches']} batches, median of the repetitions",
            lat["results"], "cost_us", "hybrid_vs_partitioned_latency", latency=True))
    if "heuristics" in result:
        console.print(_heuristics_table(result["heuristics"]))
    if any(s in result for s in ENGINE_SECTIONS):
        parts = []
        if "engine-light" in result:
            by_batch = result["engine-light"]["nonblocking_vs_lock_speedup_2_threads_by_batch_size"]
            parts.append(f"non-blocking vs lock-based at 2 threads, light: "
                         f"{fmt(result['engine_nonblocking_vs_lock_speedup_2_threads'], 3)}× (by batch size: "
                         f"{', '.join(f'{k}: {fmt(v, 3)}×' for k, v in by_batch.items())})")
        if "engine-pipeline" in result:
            parts.append(f"pipeline: {fmt(result['engine_pipeline_nonblocking_vs_lock_speedup_2_threads'], 3)}×")
        if "engine-latency" in result:
            parts.append(f"hybrid / partitioned latency at 100 µs: "
                         f"{fmt(result['engine_hybrid_vs_partitioned_latency_ratio_100us'], 3)}")
        parts.append("every engine run's output equals the sequential run, in order")
        console.print("engine — " + "; ".join(parts))
        console.print(result["engine_note"])


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as rich tables."""
    print_structures(result, console)
    print_engine(result, console)
    if result.get("quick"):
        console.print("--quick: smoke-test sizes, the numbers are not measurements.")
    console.print(f"load average (1 min): {result['load_average_1min_start']:.2f} at the start, "
                  f"{result['machine']['load_average_1min']:.2f} at the end — other processes may have competed "
                  "for the cores.")
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")
