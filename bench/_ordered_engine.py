"""The engine sections of ``elastream bench ordered``: ordered-multicore §7 shapes on es.Flow + es.Runner.

Each run builds a linear flow of function operators (a list of
:class:`Stage`), runs it with ``es.Runner(threads=..., reorder=...,
partitioning=..., policy=...)`` — with more than one thread the runtime's
dynamic allotment puts several workers on the stateless and partitioned
operators and restores order through the reorder buffer — and checks that the
sink received exactly the output of a sequential one-tuple-at-a-time run of
the same stage logic (Definition 5.1), in order. A run that differs, or does
not finish within its timeout, raises RuntimeError: a wrong answer is never a
number in a table.

Throughput and latency follow §7: only the tuples from the 20th to the 80th
percentile of the output (by arrival) count, to leave out start-up and drain.
Latency is per tuple at the sink: from the source's stamp (end-to-end, the
``heuristics`` section) or from the start of the partitioned operator's
processing of the tuple (the ``engine-latency`` section, Fig. 10's
definition).

Per-tuple work is sha256 over a buffer sized to the cost (hashlib releases
the GIL), so worker threads overlap it; the engine itself — scheduling,
buffers, the reorder buffer, the partitioned queues — is Python and holds the
GIL. Everything here runs on the benchmark's thread except the stage
functions, which run on the engine's workers.
"""

from __future__ import annotations

import argparse
import contextlib
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Any

import elastream as es
from elastream.bench._common import timed
from elastream.bench._ordered_common import (KEY_SPACE, best, check_order, explode_key, gaussian_keys, make_work,
                                             progress)
from elastream.operators.base import FunctionOperator
from elastream.ops.keyed import KeyedProcess
from elastream.workloads.measure import StampedSource, percentile

ENGINE_SECTIONS = ("engine-light", "engine-pipeline", "engine-skew", "engine-latency", "heuristics")
ENGINE_GIL_NOTE = ("GIL case (engine sections): release — operator work is hashlib.sha256 over a >= 4 KB buffer, "
                   "which releases the GIL, so worker threads overlap it; the engine itself (scheduling, port "
                   "buffers, reorder buffer, partitioned queues, the stage functions' Python) holds the GIL. "
                   "With 1 thread the runtime uses its sequential driver (no reorder buffer), so both schemes "
                   "are the same there.")
HEURISTIC_POLICIES = ("qst", "lp", "et", "ct", "least_recently_run")
SINK = "sink"
WINDOW = (0.2, 0.8)  # §7: markers from the 20th to the 80th percentile
MIN_WINDOW_BATCHES = 8
LATENCY_QUEUE_BATCHES = 4  # engine-latency: port queues of this many batches


# --- stages: one description gives both the flow and its sequential expectation ---------------


@dataclass(frozen=True, slots=True)
class Stage:
    """One function operator of a linear pipeline.

    ``fn`` is the pure logic: ``x -> y`` (map), ``x -> bool`` (filter),
    ``x -> iterable`` (flat_map) or ``(count, x) -> (count, outputs)`` (keyed,
    one integer state per key). The engine runs it after ``cost_us`` of
    GIL-releasing work; the sequential expectation runs it without.
    ``stamp_start`` (keyed only) appends ``perf_counter()`` taken before the
    work to every output, for processing latency at the sink.
    """

    name: str
    kind: str
    fn: Callable[..., Any]
    cost_us: float = 0.0
    key: Callable[[Any], Any] | None = None
    partitions: int = 1
    key_range: tuple[int, int] | None = None
    stamp_start: bool = False


def _engine_fn(stage: Stage) -> Callable[..., Any]:
    """The stage's logic behind its per-tuple work (and processing-start stamp)."""
    work, fn = make_work(stage.cost_us), stage.fn
    if stage.stamp_start:
        def stamped_step(state: int, item: Any) -> tuple[int, list]:
            t = perf_counter()
            work()
            state, out = fn(state, item)
            return state, [(*o, t) for o in out]
        return stamped_step

    def worked(*args: Any) -> Any:
        work()
        return fn(*args)
    return worked


def build_flow(name: str, source: es.Operator, stages: Sequence[Stage], stamped: bool) -> es.Flow:
    """``source`` → the stages → a :class:`CheckedSink` named ``sink``."""
    flow = es.Flow(name)
    s = flow.source(source, name="source")
    for st in stages:
        fn = _engine_fn(st)
        if st.kind == "map":
            s = s.map(fn, name=st.name)
        elif st.kind == "filter":
            s = s.filter(fn, name=st.name)
        elif st.kind == "flat_map":
            s = s.flat_map(fn, name=st.name)
        elif st.kind == "keyed":
            op = KeyedProcess(st.key, fn, int, st.partitions, "range" if st.key_range else "hash")
            if st.key_range is not None:
                op.key_range = st.key_range  # read by the runtime's range partitioner
            s = s.then(op, name=st.name)
        else:
            raise ValueError(f"unknown stage kind {st.kind!r}")
    s.sink(CheckedSink(stamped), name=SINK)
    return flow


def sequential(stages: Sequence[Stage], items: Iterable[Any]) -> list[Any]:
    """The stages' logic applied one tuple at a time, in order: what every engine run must output.

    Example: ``sequential([Stage("m", "map", lambda x: x + 1)], [1, 2]) == [2, 3]``
    """
    out = list(items)
    for st in stages:
        fn = st.fn
        if st.kind == "map":
            out = [fn(x) for x in out]
        elif st.kind == "filter":
            out = [x for x in out if fn(x)]
        elif st.kind == "flat_map":
            out = [y for x in out for y in fn(x)]
        else:
            states: dict[Any, int] = {}
            folded: list[Any] = []
            for x in out:
                k = st.key(x)  # type: ignore[misc]
                states[k], emitted = fn(states.get(k, 0), x)
                folded.extend(emitted)
            out = folded
    return out


# --- the sink and one checked run --------------------------------------------------------------


@dataclass(slots=True)
class SinkRecord:
    """What a :class:`CheckedSink` saw: payloads in arrival order, latencies, batch arrivals."""

    items: list[Any] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(arrival time, tuples) per received batch."""


class CheckedSink(FunctionOperator):
    """Keep every tuple for the order check; with ``stamped``, its last field is a stamp turned into latency."""

    kind = "sink"

    def __init__(self, stamped: bool = False) -> None:
        super().__init__(inputs=1, outputs=0)
        self.stamped = stamped
        self.record = SinkRecord()

    def open(self, ctx: Any) -> None:
        self.record = SinkRecord()

    def on_batch(self, items: list, port: int) -> None:
        now = perf_counter()
        rec = self.record
        rec.arrivals.append((now, len(items)))
        if self.stamped:
            rec.items.extend([x[:-1] for x in items])
            rec.latencies_s.extend([now - x[-1] for x in items])
        else:
            rec.items.extend(items)

    def result(self) -> SinkRecord:
        return self.record


def steady_throughput(rec: SinkRecord, elapsed_s: float) -> float:
    """Tuples/s at the sink between the arrivals of the 20th and the 80th percentile tuple (§7).

    The tuples of the batch that crosses the 20th percentile only open the
    window. With fewer than :data:`MIN_WINDOW_BATCHES` batches inside it, batch
    bursts would dominate, so it falls back to all tuples over the whole run.
    """
    total = len(rec.items)
    lo, hi = WINDOW[0] * total, WINDOW[1] * total
    seen, start, batches = 0, None, 0
    for t, n in rec.arrivals:
        seen += n
        if start is not None:
            batches += 1
        elif seen >= lo:
            start = (t, seen)
        if seen >= hi:
            if start is not None and batches >= MIN_WINDOW_BATCHES and t > start[0]:
                return (seen - start[1]) / (t - start[0])
            break
    return total / elapsed_s if elapsed_s > 0 else 0.0


def steady_latency(rec: SinkRecord) -> dict[str, float] | None:
    """Mean / p50 / p99 / max latency (ms) of the tuples from the 20th to the 80th percentile; None if unstamped."""
    values = rec.latencies_s
    if not values:
        return None
    window = sorted(values[int(WINDOW[0] * len(values)):max(1, int(WINDOW[1] * len(values)))])
    return {"mean_ms": 1e3 * sum(window) / len(window), "p50_ms": 1e3 * percentile(window, 50),
            "p99_ms": 1e3 * percentile(window, 99), "max_ms": 1e3 * window[-1]}


def _ordered_totals(allotted: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Reorder-buffer counters summed over the operators that ran under dynamic allotment."""
    out = {"contended": 0, "blocked_s": 0.0, "refused": 0, "max_partition_share": None}
    for stats in allotted.values():
        r = stats["reorder"]
        out["contended"] += r.contended
        out["blocked_s"] += r.blocked_s
        out["refused"] += r.refused
        if "partitioned_input" in stats:
            out["max_partition_share"] = stats["partitioned_input"].max_partition_share
    return out


def checked_run(flow: es.Flow, expected: Sequence[Any], what: str, *, timeout: float,
                cost_of: str | None = None, **runner_kw: Any) -> dict[str, Any]:
    """Run ``flow`` to completion, check its sink against ``expected``; return the measured row.

    ``cost_of`` names the operator whose average busy time per input tuple
    (Fig. 12b / 13b: processing plus any time its workers were blocked) is reported.
    """
    c0, t0 = process_time(), perf_counter()
    handle = es.Runner(**runner_kw).start(flow)
    try:
        result = handle.wait(timeout)
    except TimeoutError:
        states = handle.states()
        with contextlib.suppress(Exception):  # the hang is what we report
            handle.shutdown(timeout=5.0)
        raise RuntimeError(f"{what}: did not finish within {timeout:g} s ({runner_kw}); "
                           f"operator states: {states}") from None
    wall, cpu = perf_counter() - t0, process_time() - c0
    rec: SinkRecord = result.outputs[SINK]
    check_order(rec.items, expected, what)
    row: dict[str, Any] = {"batch_size": runner_kw.get("batch_size"), "tuples_out": len(rec.items),
                           "elapsed_s": result.elapsed_s,
                           "throughput_tuples_per_s": steady_throughput(rec, result.elapsed_s),
                           "cores_used": cpu / wall if wall > 0 else 0.0, "latency": steady_latency(rec),
                           "verified": True, **_ordered_totals(handle.allotment_statistics())}
    if cost_of is not None:
        op = result.stats.operators[cost_of]
        row["avg_cost_us"] = op.busy_s / op.tuples_in * 1e6 if op.tuples_in else None
    return row


def _runner_kw(args: argparse.Namespace, **kw: Any) -> dict[str, Any]:
    """Runner options of an engine run: the shared batch and queue sizes, overridden by ``kw``
    (``reorder`` / ``partitioning`` go into the run's OrderingConfig)."""
    ordering = {name: kw.pop(name) for name in ("reorder", "partitioning") if name in kw}
    extra = {"ordering": es.OrderingConfig(**ordering)} if ordering else {}
    return {"batch_size": args.engine_batch_size, "max_queue_size": args.engine_queue_size, **extra, **kw}


def _sweep(name: str, configs: Sequence[tuple], repeat: int, once: Callable[..., dict[str, Any]],
           pick: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> list[dict[str, Any]]:
    """``pick`` of ``repeat`` runs per config; repetitions are the outer loop so load bursts hit all alike."""
    runs: dict[tuple, list[dict[str, Any]]] = {c: [] for c in configs}
    for i in range(max(1, repeat)):
        progress(f"{name}: repetition {i + 1} of {max(1, repeat)}")
        for c in configs:
            runs[c].append(once(*c))
    return [pick(runs[c]) for c in configs]


def _by_throughput(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return best(rows, "throughput_tuples_per_s")


# --- Fig. 12: a light stateless operator --------------------------------------------------------


def _identity(x: int) -> int:
    return x


def plain_loop_rate(n: int, cost_us: float) -> float:
    """Tuples/s of a plain Python loop doing the light operator's work: the sequential reference."""
    fn = _engine_fn(Stage("light", "map", _identity, cost_us))
    t = timed(lambda: [fn(x) for x in range(n)])
    return n / t.wall_s


def run_engine_light(args: argparse.Namespace) -> dict[str, Any]:
    """Fig. 12 on the engine: throughput vs threads, non-blocking vs lock-based reorder buffer.

    The runtime numbers one batch per serial, so the batch size sets how often
    the reorder buffer is used: batch size 1 is §3's one serial per tuple.
    """
    n = args.engine_light_tuples
    stages = [Stage("light", "map", _identity, args.light_cost_us)]
    expected = sequential(stages, range(n))

    def once(batch: int, scheme: str, threads: int) -> dict[str, Any]:
        flow = build_flow("engine-light", es.ops.FromIterable(range(n)), stages, stamped=False)
        row = checked_run(flow, expected, f"engine-light/{scheme}/{threads} threads/batch {batch}",
                          timeout=args.run_timeout, cost_of="light",
                          **_runner_kw(args, threads=threads, reorder=scheme, batch_size=batch))
        return {"scheme": scheme, "threads": threads, **row}

    configs = [(b, s, w) for b in args.engine_light_batch_sizes for s in ("nonblocking", "lock")
               for w in args.engine_threads]
    rows = _with_speedup(_sweep("engine-light", configs, args.engine_repeat, once, _by_throughput))
    by_batch = {str(b): _scheme_ratio([r for r in rows if r["batch_size"] == b])
                for b in args.engine_light_batch_sizes}
    return {"tuples": n, "cost_us": args.light_cost_us, "batch_sizes": args.engine_light_batch_sizes,
            "plain_loop_tuples_per_s": plain_loop_rate(n, args.light_cost_us), "results": rows,
            "nonblocking_vs_lock_speedup_2_threads_by_batch_size": by_batch,
            "nonblocking_vs_lock_speedup_2_threads": by_batch[str(args.engine_light_batch_sizes[0])]}


def _with_speedup(rows: list[dict[str, Any]], field_name: str = "throughput_tuples_per_s") -> list[dict[str, Any]]:
    """Add each row's speed-up over the same scheme (and batch size) on 1 thread."""
    for r in rows:
        base = next((b[field_name] for b in rows if b["scheme"] == r["scheme"] and b["threads"] == 1
                     and b.get("batch_size") == r.get("batch_size")), None)
        r["speedup_vs_1_thread"] = r[field_name] / base if base else None
    return rows


def _scheme_ratio(rows: list[dict[str, Any]], threads: int = 2,
                  field_name: str = "throughput_tuples_per_s") -> float | None:
    """Non-blocking over lock-based ``field_name`` at ``threads``, or None if not measured."""
    by = {(r["scheme"], r["threads"]): r[field_name] for r in rows}
    if ("nonblocking", threads) in by and ("lock", threads) in by:
        return by["nonblocking", threads] / by["lock", threads]
    return None


# --- Fig. 13: a selectivity-s stateless operator, then a partitioned one -----------------------


def pipeline_stages(args: argparse.Namespace) -> list[Stage]:
    """Fig. 13: explode each input into ``selectivity`` keyed outputs, then a running count per key."""
    sel = args.selectivity

    def explode(x: int) -> list[tuple[int, int]]:
        return [(explode_key(x, j, sel), x) for j in range(sel)]

    def count(n: int, item: tuple[int, int]) -> tuple[int, list[tuple[int, int]]]:
        return n + 1, [(item[0], n + 1)]

    return [Stage("explode", "flat_map", explode, args.pipeline_cost_us),
            Stage("count", "keyed", count, args.partitioned_cost_us, key=_first, partitions=args.pipeline_partitions)]


def _first(item: Sequence[Any]) -> Any:
    return item[0]


def run_engine_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """Fig. 13 on the engine: pipeline throughput vs threads for both reorder schemes (hybrid partitioning).

    The flat_map numbers one batch of ``--engine-pipeline-batch-size`` inputs
    per serial (the paper: one input), whose ``selectivity`` outputs per input
    all pass through the reorder buffer under that serial.
    """
    n, sel = args.engine_pipeline_inputs, args.selectivity
    stages = pipeline_stages(args)
    expected = sequential(stages, range(n))

    def once(scheme: str, threads: int) -> dict[str, Any]:
        flow = build_flow("engine-pipeline", es.ops.FromIterable(range(n)), stages, stamped=False)
        row = checked_run(flow, expected, f"engine-pipeline/{scheme}/{threads} threads", timeout=args.run_timeout,
                          cost_of="explode", **_runner_kw(args, threads=threads, reorder=scheme,
                                                          batch_size=args.engine_pipeline_batch_size))
        row["throughput_inputs_per_s"] = row["throughput_tuples_per_s"] / sel
        return {"scheme": scheme, "threads": threads, **row}

    configs = [(s, w) for s in ("nonblocking", "lock") for w in args.engine_threads]
    rows = _with_speedup(_sweep("engine-pipeline", configs, args.engine_repeat, once, _by_throughput))
    return {"inputs": n, "selectivity": sel, "cost_us": args.pipeline_cost_us,
            "partitioned_cost_us": args.partitioned_cost_us, "partitions": args.pipeline_partitions,
            "partitioning": "hybrid", "batch_size": args.engine_pipeline_batch_size, "results": rows,
            "nonblocking_vs_lock_speedup_2_threads": _scheme_ratio(rows)}


# --- Fig. 9 and Fig. 10: partitioning schemes ---------------------------------------------------


def _count_key(n: int, item: tuple[int, int]) -> tuple[int, list[tuple[int, int, int]]]:
    """Running count per key: ``(seq, key)`` → ``(seq, key, count)``."""
    return n + 1, [(item[0], item[1], n + 1)]


def _second(item: Sequence[Any]) -> Any:
    return item[1]


def _partitions_for(scheme: str, threads: int, args: argparse.Namespace) -> int:
    """§7.2: the partitioned-queue baseline has one partition per worker; the hybrid queue finer ones."""
    return args.hybrid_partitions if scheme == "hybrid" else threads


def _partitioned_run(scheme: str, keys: list[int], threads: int, cost_us: float, stamp: bool, what: str,
                     args: argparse.Namespace, **runner: Any) -> dict[str, Any]:
    """One range-partitioned running count over ``keys`` with ``partitioning=scheme`` (``runner``: overrides)."""
    stage = Stage("count", "keyed", _count_key, cost_us, key=_second,
                  partitions=_partitions_for(scheme, threads, args), key_range=(0, KEY_SPACE), stamp_start=stamp)
    items = list(enumerate(keys))
    flow = build_flow(what, es.ops.FromIterable(items), [stage], stamped=stamp)
    row = checked_run(flow, sequential([stage], items), f"{what}/{scheme}", timeout=args.run_timeout,
                      cost_of="count", **_runner_kw(args, threads=threads, partitioning=scheme, **runner))
    return {"scheme": scheme, "partitions": stage.partitions, **row}


def run_engine_skew(args: argparse.Namespace) -> dict[str, Any]:
    """Fig. 9 on the engine: throughput of both partitioning schemes as σ varies (smaller σ = more skew)."""
    threads, rows = args.skew_workers, []
    for sigma in args.skew_sigmas:
        keys = gaussian_keys(args.engine_skew_tuples, sigma, random.Random(args.seed))
        runs = _sweep(f"engine-skew σ={sigma:g}", [("hybrid",), ("partitioned",)], args.engine_repeat,
                      lambda s: _partitioned_run(s, keys, threads, args.skew_cost_us, False,
                                                 f"engine-skew σ={sigma:g}", args), _by_throughput)
        row: dict[str, Any] = {"sigma": sigma, "hybrid": runs[0], "partitioned": runs[1]}
        row["hybrid_vs_partitioned_throughput"] = (runs[0]["throughput_tuples_per_s"]
                                                   / runs[1]["throughput_tuples_per_s"])
        rows.append(row)
    return {"threads": threads, "tuples": args.engine_skew_tuples, "cost_us": args.skew_cost_us,
            "hybrid_partitions": args.hybrid_partitions, "results": rows}


def run_engine_latency(args: argparse.Namespace) -> dict[str, Any]:
    """Fig. 10 on the engine: processing latency (start of processing → sink) vs per-tuple cost, uniform keys.

    The runtime numbers whole batches, so an output also waits for the rest
    of its batch: each batch size of ``--engine-latency-batch-sizes`` is a
    series, run with port queues of four batches so that waiting in front of
    the sink stays small. The median of the repetitions (by mean latency) is kept.
    """
    threads, rows = args.latency_workers, []
    for batch in args.engine_latency_batch_sizes:
        for cost in args.latency_costs:
            rows.append(_latency_point(args, threads, batch, cost))
    first = args.engine_latency_batch_sizes[0]
    headline = [r for r in rows if r["cost_us"] == 100.0 and r["batch_size"] == first]
    return {"threads": threads, "hybrid_partitions": args.hybrid_partitions,
            "batch_sizes": args.engine_latency_batch_sizes, "queue_batches": LATENCY_QUEUE_BATCHES, "results": rows,
            "hybrid_vs_partitioned_latency_ratio_100us": headline[0]["hybrid_vs_partitioned_latency"] if headline
            else None}


def _latency_point(args: argparse.Namespace, threads: int, batch: int, cost: float) -> dict[str, Any]:
    """Both partitioning schemes at one (batch size, per-tuple cost)."""
    n = int(min(args.latency_max_tuples, max(200, args.latency_seconds * threads / (cost * 1e-6))))
    rng = random.Random(args.seed)
    keys = [rng.randrange(KEY_SPACE) for _ in range(n)]
    what = f"engine-latency {cost:g} µs/batch {batch}"
    runs = _sweep(what, [("hybrid",), ("partitioned",)], args.engine_repeat,
                  lambda s: _partitioned_run(s, keys, threads, cost, True, what, args, batch_size=batch,
                                             max_queue_size=LATENCY_QUEUE_BATCHES * batch),
                  lambda rs: sorted(rs, key=lambda r: r["latency"]["mean_ms"])[len(rs) // 2])
    h, p = runs[0]["latency"], runs[1]["latency"]
    return {"batch_size": batch, "cost_us": cost, "tuples": n, "hybrid": runs[0], "partitioned": runs[1],
            "hybrid_vs_partitioned_latency": h["mean_ms"] / p["mean_ms"],
            "hybrid_vs_partitioned_p99_latency": h["p99_ms"] / p["p99_ms"]}


# --- Fig. 8: scheduling heuristics on a pipeline --------------------------------------------------


def heuristic_stages(args: argparse.Namespace) -> list[Stage]:
    """A TPCx-BB-like chain SL → SL (s=2) → PS → SL (s=0.5) of different costs; the stamp travels last."""
    c_parse, c_explode, c_count, c_filter = args.heuristics_costs_us

    def parse(item: tuple[int, float]) -> tuple[int, int, float]:
        seq, t = item
        return seq, (seq * 7919) % KEY_SPACE, t

    def explode(item: tuple[int, int, float]) -> list[tuple[int, int, int, float]]:
        seq, k, t = item
        return [(seq, (k + 37 * j) % KEY_SPACE, j, t) for j in range(2)]

    def count(n: int, item: tuple[int, int, int, float]) -> tuple[int, list[tuple[int, int, int, int, float]]]:
        seq, k, j, t = item
        return n + 1, [(seq, k, j, n + 1, t)]

    def even(item: tuple[int, int, int, int, float]) -> bool:
        return item[3] % 2 == 0

    return [Stage("parse", "map", parse, c_parse), Stage("explode", "flat_map", explode, c_explode),
            Stage("count", "keyed", count, c_count, key=_second, partitions=args.heuristics_partitions),
            Stage("even", "filter", even, c_filter)]


def run_heuristics(args: argparse.Namespace) -> dict[str, Any]:
    """Fig. 8 on the engine: throughput and end-to-end latency vs threads for each scheduling policy."""
    n = args.heuristics_inputs
    stages = heuristic_stages(args)
    expected = [x[:-1] for x in sequential(stages, ((seq, 0.0) for seq in range(n)))]

    def once(policy: str, threads: int) -> dict[str, Any]:
        flow = build_flow("heuristics", StampedSource(n), stages, stamped=True)
        row = checked_run(flow, expected, f"heuristics/{policy}/{threads} threads", timeout=args.run_timeout,
                          **_runner_kw(args, threads=threads, policy=policy))
        return {"policy": policy, "threads": threads, **row}

    configs = [(p, w) for p in args.policies for w in args.heuristics_threads]
    rows = _sweep("heuristics", configs, args.engine_repeat, once, _by_throughput)
    out_per_in = len(expected) / n if n else 0.0
    for r in rows:
        r["throughput_inputs_per_s"] = r["throughput_tuples_per_s"] / out_per_in if out_per_in else None
    return {"inputs": n, "outputs": len(expected), "costs_us": dict(zip((s.name for s in stages),
                                                                          args.heuristics_costs_us)),
            "partitions": args.heuristics_partitions, "results": rows}


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "engine-light": run_engine_light, "engine-pipeline": run_engine_pipeline, "engine-skew": run_engine_skew,
    "engine-latency": run_engine_latency, "heuristics": run_heuristics}
