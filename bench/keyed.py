"""``elastream bench keyed``: an ordered running sum per key, plain loop vs elastream on 1 and 2 processes.

The workload of issue 4's performance goal: 200,000 ``(key, value)`` tuples
over 1,000 uniformly drawn keys; per tuple a pure-Python function of about
20 µs (it holds the GIL) whose result is added to the key's running sum; the
output is ``(key, running sum)`` per tuple, in input order.

* ``plain loop`` — the single-core Python loop (a dict of sums, one pass).
* ``elastream P=1`` — ``key_by(key, partitions=...).reduce(...)`` on one process.
* ``elastream P=2`` — the same flow with the reduce replicated over two worker
  processes (``replicas={"sum": P}``: ordered split by key hash → one replica
  per process → ordered merge through the reorder buffer, C-Stream §4.2).
* ``hand-split 2 processes`` (``--no-hand`` leaves it out) — the machine's
  ceiling for comparison, not a competitor: a pool of two processes each runs
  the plain loop over the keys of one parity; nothing is merged or ordered,
  only the data goes out and the sums come back. On a VM whose cores run
  slower when both are busy this shows what two processes can give at all.
* *engine efficiency* of each elastream row — the seconds the per-tuple
  function's operator (its replicas) was busy over ``processes ×`` the run's
  wall-clock seconds: the share of the cores the user's function had. What is
  missing is elastream's own work (routing, merging, moving tuples between
  processes, scheduling), idle time and the start; a slow phase of the VM
  slows the function itself and shows in the ceiling, not here. The
  *engine losses* of that run (:func:`engine_losses`) split the missing
  core-seconds into elastream's own operators, idle workers, cores before a
  process's worker started or after it ended, and the gaps between activations.
* the *function slowdown* of each elastream and hand-split run — the
  per-tuple function's seconds in that run (the replicas' busy time; the
  hand-split workers' loops, which keep no outputs and so read a little low)
  over the plain loop's seconds in the same repetition: above 1 when the
  function itself ran slower per tuple, as it does when both cores of a VM are
  busy at once. It closes the account of a run:
  plain loop / run = processes × engine efficiency ÷ function slowdown.
* ``Spark local[2] applyInPandasWithState`` (``--spark``) — the same job on
  Spark Structured Streaming, written with Spark's own API
  (:mod:`elastream.bench._keyed_spark`): the tuples as Parquet files, one per
  micro-batch (``--spark-batches``), ``groupBy(key).applyInPandasWithState``
  keeping each key's running sum in the group state, outputs checked equal to
  the plain loop's. Timed from the query's start to its end; the session, the
  files and one warm-up query are not timed.
* ``Bytewax 2 processes`` (``--bytewax``, the ``compare`` extra) — the same
  job on Bytewax (:mod:`elastream.bench._keyed_bytewax`): one input
  partition, ``key_on``, ``stateful_map``, two processes of one worker each.
  Bytewax keeps each key's order only; the driver restores input order after
  the run, untimed, before checking the outputs.
* the *two-core ceiling* (with the hand-split) — no data at all: short
  slices of the per-tuple function in one pool process alone, alternating
  with slices in both at once; the ratio of calls made is what two cores give
  this function right now (2.0 when both run as fast as one alone). Measured
  in every repetition, next to the rows it explains.

This is *process* parallelism: the per-tuple function holds the GIL, so only
worker processes (one core each) can overlap it. Every elastream time is the
whole ``Runner.run`` — workers started from the fork server, compiling, the
run, collecting the 200,000 outputs back, teardown; the one-time start of the
fork server itself (once per Python session) is timed separately, and
``--start-method spawn`` shows a fresh interpreter per worker. Each elastream
output is checked to equal the plain loop's, element by element. Repetitions
are the outer loop (load bursts from other users hit every configuration
alike); the best time of each is kept.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import elastream as es
from elastream.bench._keyed_defaults import DEFAULT_RUNNERS, default_rows, run_default
from elastream.processes.replicate import parse_replica_name, replicated_placement

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

# rich and the shared helpers are imported where they are used: worker processes import this
# module for the per-tuple functions, and rich alone would add ~0.2 s to each worker's start.

GIL_NOTE = ("GIL case: hold — the per-tuple function is pure Python, so threads cannot overlap it; the speed-up "
            "comes from worker processes (process parallelism, one core each).")
CALIBRATION_S = 0.2
#: Calibration times slices of 100 calls for this long and keeps their median (at least SAMPLES slices).
CALIBRATION_SPREAD_S = 1.0
CALIBRATION_QUANTILE = 0.5
CALIBRATION_SAMPLES = 25
#: A plain-loop pass over the data checks the calibration (:func:`checked_rounds`).
RESCALE_TOLERANCE = 0.1
#: The two-core ceiling (:func:`_run_ceiling`) alternates CEILING_SLICES slices of CEILING_S seconds
#: alone and as a pair, so that a slow phase of the VM (seconds long) weighs on both sides alike.
CEILING_S = 0.1
CEILING_SLICES = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``elastream bench keyed``."""
    parser.add_argument("--tuples", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--cost-us", type=float, default=20.0, help="per-tuple function cost (pure Python)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="elastream process counts")
    parser.add_argument("--partitions", type=int, default=64, help="key partitions (bounds the replicas)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions; the best time of each row is kept")
    parser.add_argument("--start-method", choices=("forkserver", "spawn"), default="forkserver")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-hand", dest="hand", action="store_false",
                        help="leave out the hand-split two-process reference")
    parser.add_argument("--merge-process", type=int, default=0,
                        help="process of the ordered merge and the sink (the source and split stay on 0)")
    parser.add_argument("--spark", action="store_true",
                        help="add Spark Structured Streaming (applyInPandasWithState) on --spark-master")
    parser.add_argument("--spark-master", default="local[2]", help="the Spark row's master (default local[2])")
    parser.add_argument("--spark-batches", type=int, default=4, help="micro-batches of the Spark row's stream")
    parser.add_argument("--default-rows", action=argparse.BooleanOptionalAction, default=True,
                        help="also time plain es.Runner() and es.Runner(processes=2) as a user writes them")
    parser.add_argument("--bytewax", action="store_true",
                        help="add Bytewax on two processes (needs the compare extra: pip install -e '.[compare]')")


# -- the workload --------------------------------------------------------------------------------
def burn(value: int, rounds: int) -> int:
    """The per-tuple function: ``rounds`` steps of integer arithmetic in pure Python (holds the GIL)."""
    acc = value
    for i in range(rounds):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


def add_burned(rounds: int, acc: int, item: tuple[int, int]) -> int:
    """The reduce step: the key's running sum plus the costly function of the tuple's value."""
    return acc + burn(item[1], rounds)


def key_of(item: tuple[int, int]) -> int:
    """The tuple's key."""
    return item[0]


def make_data(tuples: int, keys: int, seed: int) -> list[tuple[int, int]]:
    """``tuples`` pairs ``(key, value)``, keys uniform over ``range(keys)``, seeded."""
    rng = random.Random(seed)
    return [(rng.randrange(keys), rng.randrange(1 << 16)) for _ in range(tuples)]


def calibrate(cost_us: float) -> int:
    """Rounds of :func:`burn` that take about ``cost_us`` on this machine (a first estimate).

    Short timed slices spread over :data:`CALIBRATION_SPREAD_S`, of which the median
    counts: this VM's speed drifts (a process's first ~0.2 s and other moments run up to
    ~40% slower, for seconds); :func:`checked_rounds` then checks it on a whole pass.
    """
    rounds = 100
    while True:
        t0 = time.perf_counter()
        reps = 0
        while time.perf_counter() - t0 < CALIBRATION_S / 4:
            burn(reps, rounds)
            reps += 1
        per_call = (time.perf_counter() - t0) / reps
        if per_call > 2e-6:
            break
        rounds *= 4
    return max(1, round(rounds * cost_us * 1e-6 / _typical_call_time(rounds)))


def _typical_call_time(rounds: int) -> float:
    """Seconds per ``burn(_, rounds)`` call: the CALIBRATION_QUANTILE of slices timed over CALIBRATION_SPREAD_S."""
    slices = []
    t_end = time.perf_counter() + CALIBRATION_SPREAD_S
    while time.perf_counter() < t_end or len(slices) < CALIBRATION_SAMPLES:
        slices.append(_time_calls(rounds))
    slices.sort()
    return slices[int(len(slices) * CALIBRATION_QUANTILE)]


def checked_rounds(data: list[tuple[int, int]], rounds: int, cost_us: float) -> int:
    """``rounds``, re-scaled upwards when a plain-loop pass over ``data`` runs cheaper than ``cost_us``.

    The pass takes seconds and is timed in this thread's CPU time (other programs taking the
    CPU meanwhile do not count). Only a too-cheap pass re-scales: the VM's slow phases (up to
    ~40% for seconds, and a process's first second) only ever make work look *dearer*, so a
    cheap pass means the short calibration fell into one, while a dear pass may itself have.
    The pass is discarded (it warms up too).
    """
    t0 = time.thread_time()
    plain_loop(data, rounds)
    return rescaled_rounds(rounds, cost_us, (time.thread_time() - t0) / len(data) * 1e6)


def rescaled_rounds(rounds: int, cost_us: float, measured_us: float) -> int:
    """``rounds`` scaled up to ``cost_us`` when ``measured_us`` falls short by more than RESCALE_TOLERANCE.

    Example: ``rescaled_rounds(300, 20.0, 12.0)`` → 500; ``rescaled_rounds(300, 20.0, 30.0)`` → 300.
    """
    if measured_us >= cost_us * (1.0 - RESCALE_TOLERANCE):
        return rounds
    return max(1, round(rounds * cost_us / measured_us))


def _time_calls(rounds: int, calls: int = 100) -> float:
    t0 = time.thread_time()  # CPU time: other programs running meanwhile do not count
    for i in range(calls):
        burn(i, rounds)
    return (time.thread_time() - t0) / calls


def plain_loop(data: list[tuple[int, int]], rounds: int) -> list[tuple[int, int]]:
    """The reference: one core, one pass, a dict of running sums, the same per-tuple function."""
    step = partial(add_burned, rounds)
    sums: dict[int, int] = {}
    out = []
    for item in data:
        k = item[0]
        s = step(sums.get(k, 0), item)
        sums[k] = s
        out.append((k, s))
    return out


def build_flow(data: list[tuple[int, int]], rounds: int, partitions: int) -> es.Flow:
    """source → key_by(key).reduce(running sum + burn) → Collect, the reduce named ``sum``."""
    flow = es.Flow("keyed")
    (flow.source(es.ops.FromIterable(data), name="src")
         .key_by(key_of, partitions=partitions)
         .reduce(partial(add_burned, rounds), initial=int, name="sum")
         .sink(es.ops.Collect(), name="out"))
    return flow


def run_elastream(data: list[tuple[int, int]], rounds: int, processes: int, args: argparse.Namespace) -> Any:
    """One timed ``Runner.run`` of the flow on ``processes`` processes; returns (seconds, outputs, placement,
    engine), ``engine`` the function's busy seconds, the run's efficiency and :func:`engine_losses`."""
    flow = build_flow(data, rounds, args.partitions)
    placement: Any = "auto"
    replicas = None
    if processes > 1:
        base = {"src": 0, "sum": 0, "out": args.merge_process}
        replicas = {"sum": processes}
        placement = replicated_placement(flow, processes, replicas, placement=base)  # written out for the report
        placement["sum#merge"] = args.merge_process
    runner = es.Runner(processes=processes, placement=placement, replicas=replicas,
                       process_options=es.ProcessConfig(start_method=args.start_method))
    t0 = time.perf_counter()
    result = runner.run(flow, timeout=600)
    seconds = time.perf_counter() - t0
    function_s = function_busy_s(result.stats)
    engine = {"function_s": function_s, "efficiency": function_s / (processes * seconds),
              **engine_losses(result.stats, processes, seconds)}
    return seconds, result.outputs["out"], placement, engine


def engine_losses(stats: Any, processes: int, seconds: float) -> dict[str, float]:
    """Where the core-seconds the per-tuple function did not get went, in one run (one worker per process).

    ``lost_s`` = ``processes × seconds`` minus the function's busy seconds, made of ``own_work_s`` (the
    workers' busy seconds in elastream's own operators: split, merge, ring proxies, source, sink),
    ``idle_s`` (workers waiting for work), ``not_alive_s`` (cores before a process's worker started and
    after it ended: the start, the end of the run, the teardown) and ``between_s`` (the rest: scheduling
    between activations, GIL hand-offs).
    """
    function = function_busy_s(stats)
    workers = stats.workers
    own = sum(w.busy_s for w in workers) - function
    idle = sum(w.idle_s for w in workers)
    not_alive = processes * seconds - sum(w.alive_s for w in workers)
    lost = processes * seconds - function
    return {"lost_s": lost, "own_work_s": own, "idle_s": idle, "not_alive_s": not_alive,
            "between_s": lost - own - idle - not_alive}


def function_busy_s(stats: Any) -> float:
    """Seconds the per-tuple function's operator ``sum`` (or its replicas ``sum#0``, ``sum#1``, ...) was busy."""
    return sum(op.busy_s for name, op in stats.operators.items()
               if name == "sum" or (parse_replica_name(name) or ("",))[0] == "sum")


# -- the benchmark ---------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Calibrate, then time the plain loop and each process count ``--repeat`` times."""
    data = make_data(args.tuples, args.keys, args.seed)
    rounds = checked_rounds(data, calibrate(args.cost_us), args.cost_us)
    server_start_s = _warm_fork_server(args) if args.start_method == "forkserver" else None
    times: dict[str, list[float]] = {}       # every run's seconds, by row, in repetition order
    details: dict[str, list[dict[str, float]]] = {}  # and each run's function seconds (elastream: and losses)
    reference: list | None = None
    placements: dict[str, Any] = {}
    ceilings: list[float] = []
    pool = _hand_pool(args) if args.hand else None
    spark = None
    if args.bytewax:
        _check_bytewax()
    try:
        spark = _spark_row(data, rounds, args) if args.spark else None
        for _ in range(max(1, args.repeat)):
            reference = _one_round(data, rounds, args, times, details, reference, placements, pool)
            if args.bytewax:
                _note(times, "bytewax", _run_bytewax(data, rounds, reference))
            if spark is not None:
                _note(times, "spark", spark.run(reference))
            if pool is not None:
                ceilings.append(_run_ceiling(pool, rounds))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        if spark is not None:
            spark.close()
    result = _result(args, rounds, times, details, placements, server_start_s, ceilings)
    if spark is not None:
        result["spark"] = spark.describe()
    return result


def _check_bytewax() -> None:
    from elastream.bench._keyed_bytewax import available

    if not available():
        raise SystemExit("bench keyed --bytewax needs Bytewax: pip install -e '.[compare]' (make setup installs it)")


def _run_bytewax(data: list, rounds: int, reference: list) -> float:
    """One Bytewax run on two processes (:mod:`elastream.bench._keyed_bytewax`), outputs checked; its seconds."""
    from elastream.bench._keyed_bytewax import run_two_processes

    seconds, outputs = run_two_processes(data, rounds)
    if outputs != reference:
        raise AssertionError("Bytewax's running sums differ from the plain loop's")
    return seconds


def _spark_row(data: list, rounds: int, args: argparse.Namespace) -> Any:
    """The Spark session, input files and a warm query for the Spark row (:mod:`elastream.bench._keyed_spark`)."""
    from elastream.bench._keyed_spark import SparkKeyed

    return SparkKeyed(data, rounds, args.spark_master, args.spark_batches)


def _one_round(data: list, rounds: int, args: argparse.Namespace, times: dict[str, list[float]],
               details: dict[str, list[dict[str, float]]], reference: list | None, placements: dict[str, Any],
               pool: Any) -> list:
    """One repetition: the plain loop, the hand-split reference, every process count (appended to ``times``
    and ``details``)."""
    t0 = time.perf_counter()
    expected = plain_loop(data, rounds)
    _note(times, "plain", time.perf_counter() - t0)
    reference = reference if reference is not None else expected
    if expected != reference:
        raise AssertionError("the plain loop is not deterministic")
    if pool is not None:
        seconds, function_s = _run_hand(pool, data, rounds, reference)
        _note(times, "hand", seconds)
        _note(details, "hand", {"function_s": function_s})
    for p in args.processes:
        seconds, outputs, placement, engine = run_elastream(data, rounds, p, args)
        if outputs != reference:
            raise AssertionError(f"elastream with {p} processes produced different output than the plain loop")
        _note(times, f"p{p}", seconds)
        _note(details, f"p{p}", engine)
        placements[f"p{p}"] = placement
    for label in DEFAULT_RUNNERS if getattr(args, "default_rows", False) else ():
        seconds, outputs = run_default(data, rounds, label)
        if outputs != reference:
            raise AssertionError(f"elastream {label} produced different output than the plain loop")
        _note(times, label, seconds)
    return reference


def _hand_pool(args: argparse.Namespace) -> Any:
    """Two started worker processes for the hand-split reference (started outside the timing)."""
    import multiprocessing as mp

    pool = mp.get_context(args.start_method).Pool(2)
    pool.map(plain_loop_final, [([(0, 0)], 1), ([(1, 1)], 1)])
    return pool


def plain_loop_final(job: tuple[list[tuple[int, int]], int]) -> tuple[dict[int, int], float]:
    """The hand-split worker: the plain loop over its share; returns only the final sum per key, and the
    loop's seconds."""
    data, rounds = job
    step = partial(add_burned, rounds)
    sums: dict[int, int] = {}
    t0 = time.perf_counter()
    for item in data:
        k = item[0]
        sums[k] = step(sums.get(k, 0), item)
    return sums, time.perf_counter() - t0


def _run_hand(pool: Any, data: list, rounds: int, reference: list) -> tuple[float, float]:
    """Time the two halves on the pool; check the final sums against the plain loop's. Returns the seconds
    and the two workers' loops' seconds added up."""
    halves = [[x for x in data if x[0] % 2 == r] for r in range(2)]
    t0 = time.perf_counter()
    parts = pool.map(plain_loop_final, [(h, rounds) for h in halves])
    seconds = time.perf_counter() - t0
    final = {**parts[0][0], **parts[1][0]}
    if final != dict(reference):
        raise AssertionError("the hand-split reference disagrees with the plain loop's final sums")
    return seconds, parts[0][1] + parts[1][1]


def burn_for(job: tuple[int, float]) -> tuple[int, int]:
    """``(calls, pid)``: calls of ``burn(_, rounds)`` made in ``seconds`` of wall-clock time, ``job = (rounds, seconds)``."""
    rounds, seconds = job
    calls = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i in range(100):
            burn(i, rounds)
        calls += 100
    return calls, os.getpid()


def _run_ceiling(pool: Any, rounds: int) -> float:
    """What two cores give the per-tuple function now: calls made by both pool processes at once over the
    calls one of them makes alone in the same time (2.0 when both cores run as fast as one alone)."""
    alone = together = 0
    for _ in range(CEILING_SLICES):
        alone += pool.apply(burn_for, ((rounds, CEILING_S),))[0]
        pair = pool.map(burn_for, [(rounds, CEILING_S)] * 2, chunksize=1)
        if pair[0][1] == pair[1][1]:  # one process took both jobs, one after the other: not a pair
            return float("nan")
        together += pair[0][0] + pair[1][0]
    return together / alone


def _note(values: dict[str, list[float]], key: str, value: float) -> None:
    values.setdefault(key, []).append(value)


def paired_speedups(times: dict[str, list[float]], key: str) -> dict[str, float] | None:
    """Each repetition's plain loop over ``key``'s time in the same repetition: median, lowest, highest.

    The machine's speed drifts over seconds; a run compared with the plain loop timed just before it
    shares its phase, while the best of each row may come from different phases.

    Example: ``paired_speedups({"plain": [4.0, 3.0], "p2": [2.0, 2.0]}, "p2")`` → median 1.75, low 1.5, high 2.0
    """
    pairs = [p / s for p, s in zip(times.get("plain", []), times.get(key, [])) if s > 0]
    if not pairs:
        return None
    return {"median": statistics.median(pairs), "low": min(pairs), "high": max(pairs)}


def function_slowdowns(times: dict[str, list[float]], details: dict[str, list[dict[str, float]]],
                       key: str) -> dict[str, float]:
    """``key``'s function seconds over the plain loop's seconds of the same repetition: in its best run, and
    the median over the runs (both cover every tuple, so this is the ratio of seconds per tuple).

    Example: ``function_slowdowns({"plain": [4.0, 3.0], "p2": [2.0, 1.9]}, {"p2": [{"function_s": 4.4},
    {"function_s": 3.6}]}, "p2")`` → best run 1.2 (its 3.6 s against 3.0 s), median 1.15
    """
    ratios = [d["function_s"] / p for p, d in zip(times["plain"], details[key])]
    return {"best_run": _of_best_run(times[key], ratios), "median": statistics.median(ratios)}


def _result(args: argparse.Namespace, rounds: int, times: dict[str, list[float]],
            details: dict[str, list[dict[str, float]]], placements: dict[str, Any], server_start_s: float | None,
            ceilings: list[float] | None = None) -> dict[str, Any]:
    """The JSON-ready result: each row's best time (and the engine efficiency and losses of that run), its
    speed-ups paired by repetition and its function slowdowns."""
    best = {key: min(values) for key, values in times.items()}
    plain = best["plain"]
    rows = [{"config": "plain loop", "processes": 1, "seconds": plain, "tuples_per_s": args.tuples / plain,
             "speedup_vs_plain": 1.0, "output_equal": True}]
    def reference_row(key: str, config: str, processes: int | None, **extra: Any) -> dict[str, Any]:
        """A row of a reference (not elastream): its best time, its speed-ups, ``extra``."""
        return {"config": config, "processes": processes, "seconds": best[key], "tuples_per_s": args.tuples / best[key],
                "speedup_vs_plain": plain / best[key], "speedup_paired": paired_speedups(times, key), **extra,
                "reference": True}

    if "hand" in best:
        rows.append(reference_row("hand", "hand-split 2 processes", 2, output_equal=None,
                                  function_slowdown=function_slowdowns(times, details, "hand")))
    for p in args.processes:
        s = best[f"p{p}"]
        engine = dict(_of_best_run(times[f"p{p}"], details[f"p{p}"]))
        efficiency = engine.pop("efficiency")
        del engine["function_s"]
        rows.append({"config": f"elastream P={p}", "processes": p, "seconds": s, "tuples_per_s": args.tuples / s,
                     "speedup_vs_plain": plain / s, "speedup_paired": paired_speedups(times, f"p{p}"),
                     "output_equal": True, "placement": placements[f"p{p}"],
                     "engine_efficiency": efficiency, "engine_losses": engine,
                     "function_slowdown": function_slowdowns(times, details, f"p{p}")})
    rows += default_rows(best, plain, args.tuples, lambda key: paired_speedups(times, key))
    if "bytewax" in best:
        rows.append(reference_row("bytewax", "Bytewax 2 processes", 2, output_equal=True,
                                  ordered_by="the driver, after the run (not timed)"))
    if "spark" in best:
        rows.append(reference_row("spark", f"Spark {args.spark_master} applyInPandasWithState", None,
                                  output_equal=True))
    return {"benchmark": "keyed", "gil": "hold", "note": GIL_NOTE, "tuples": args.tuples, "keys": args.keys,
            "cost_us": args.cost_us, "burn_rounds": rounds, "measured_cost_us": plain / args.tuples * 1e6,
            "partitions": args.partitions, "repeat": args.repeat, "start_method": args.start_method,
            "fork_server_start_s": server_start_s, "goal_speedup_p2": 1.8, "results": rows,
            "two_core_ceiling": _ceiling_summary(ceilings or []), "machine": _machine()}


def row_named(result: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    """The first row of ``result`` whose configuration starts with ``prefix`` (None if there is none).

    Example: ``row_named(result, "Spark ")`` → the Spark row, whatever its master.
    """
    return next((r for r in result["results"] if r["config"].startswith(prefix)), None)


def spark_sentence(result: dict[str, Any], spark: dict[str, Any], p2: dict[str, Any] | None) -> str:
    """What the Spark row says, in one sentence (printed under the table)."""
    settings = result.get("spark") or {}
    text = (f"Spark Structured Streaming ({settings.get('master', '?')}, groupBy(key).applyInPandasWithState, "
            f"{settings.get('micro_batches', '?')} micro-batches, same outputs checked): "
            f"{spark['speedup_vs_plain']:.2f}x the plain loop")
    if p2 is not None:
        text += f"; elastream P=2 is {spark['seconds'] / p2['seconds']:.1f}x faster"
    return text


def paired_from_parts(row: dict[str, Any]) -> float:
    """An elastream row's best run over the plain loop of its repetition, from its parts: processes × engine
    efficiency ÷ function slowdown (the function's seconds cancel out)."""
    return row["processes"] * row["engine_efficiency"] / row["function_slowdown"]["best_run"]


def _ceiling_summary(ceilings: list[float]) -> dict[str, Any] | None:
    """Median, lowest and highest of the two-core ceilings measured (None when not measured)."""
    valid = sorted(c for c in ceilings if c == c)
    if not valid:
        return None
    return {"median": valid[len(valid) // 2], "low": valid[0], "high": valid[-1], "runs": ceilings,
            "slices": CEILING_SLICES, "slice_s": CEILING_S}


def _machine() -> dict[str, Any]:
    from elastream.bench._common import machine

    return machine()


def _of_best_run(seconds: list[float], values: list[Any]) -> Any:
    """``values`` of the run whose time is the best of ``seconds`` (the two lists run in step)."""
    return values[seconds.index(min(seconds))]


def _warm_fork_server(args: argparse.Namespace) -> float:
    """Start the fork server with a tiny two-process run; return how long that took."""
    tiny = make_data(100, 10, args.seed)
    t0 = time.perf_counter()
    flow = build_flow(tiny, 1, 2)
    es.Runner(processes=2, replicas={"sum": 2}).run(flow)
    return time.perf_counter() - t0


def print_report(result: dict[str, Any], console: Console) -> None:
    """Render a result of :func:`run` as a rich table plus the ratio to the goal."""
    from rich.table import Table

    from elastream.bench._common import fmt

    table = Table(title=f"ordered running sum per key: {result['tuples']:,} tuples, {result['keys']:,} keys, "
                        f"~{result['measured_cost_us']:.1f} µs/tuple (pure Python)")
    for col in ("configuration", "seconds", "tuples/s", "speed-up vs plain", "engine efficiency",
                "output = plain loop"):
        table.add_column(col, justify="right")
    for r in result["results"]:
        efficiency = r.get("engine_efficiency")
        table.add_row(r["config"], f"{r['seconds']:.3f}", fmt(r["tuples_per_s"], 0), f"{r['speedup_vs_plain']:.2f}",
                      "" if efficiency is None else f"{efficiency:.0%}",
                      {True: "yes", False: "NO", None: "final sums only"}[r["output_equal"]])
    console.print(table)
    p2 = row_named(result, "elastream P=2")
    if p2 is not None:
        verdict = "meets" if p2["speedup_vs_plain"] >= result["goal_speedup_p2"] else "misses"
        console.print(f"P=2 / plain loop = {p2['speedup_vs_plain']:.2f} ({verdict} the {result['goal_speedup_p2']}x "
                      f"goal); placement {p2['placement']}")
        paired = p2.get("speedup_paired")
        if paired is not None:
            console.print(f"paired by repetition (each P=2 run over the plain loop timed just before it): median "
                          f"{paired['median']:.2f} (runs {paired['low']:.2f}-{paired['high']:.2f})")
    if result["fork_server_start_s"] is not None:
        console.print(f"workers fork from a warm fork server; its one-time start took "
                      f"{result['fork_server_start_s']:.2f} s (not in the rows)")
    hand = row_named(result, "hand-split")
    if hand is not None and p2 is not None:
        console.print(f"hand-split reference (final sums only, no order) {hand['speedup_vs_plain']:.2f}: "
                      f"elastream P=2 reaches {p2['seconds'] and hand['seconds'] / p2['seconds']:.2f} of it")
    for r in result["results"]:
        if r.get("share_of_hand_tuned_p2") is not None:
            console.print(f"{r['config']} as a user writes it: {r['speedup_vs_plain']:.2f}x the plain loop, "
                          f"{r['share_of_hand_tuned_p2']:.2f} of the hand-tuned elastream P=2 (goal >= 0.9)")
    bytewax = row_named(result, "Bytewax")
    if bytewax is not None:
        console.print(f"Bytewax on 2 processes (input, key_on, stateful_map; each key in order, the outputs put "
                      f"in input order by the driver afterwards, not timed): {bytewax['speedup_vs_plain']:.2f}x the "
                      f"plain loop" + (f"; elastream P=2 is {bytewax['seconds'] / p2['seconds']:.2f}x faster"
                                        if p2 is not None else ""))
    spark = row_named(result, "Spark ")
    if spark is not None:
        console.print(spark_sentence(result, spark, p2))
    ceiling = result.get("two_core_ceiling")
    if ceiling is not None and p2 is not None:
        console.print(f"two-core ceiling for this function (both cores burning at once vs one alone, no data): "
                      f"median {ceiling['median']:.2f} (runs {ceiling['low']:.2f}-{ceiling['high']:.2f}); "
                      f"elastream P=2 / plain loop is {p2['speedup_vs_plain'] / ceiling['median']:.2f} of it")
    console.print("engine efficiency: the seconds the per-tuple function ran over processes x wall-clock seconds "
                  "(the rest is elastream's own work, idle time and the start)")
    for r in result["results"]:
        losses = r.get("engine_losses")
        if losses is not None:
            console.print(f"{r['config']}, best run: of {r['processes']} x {r['seconds']:.2f} core-seconds the function "
                          f"missed {losses['lost_s']:.3f}: elastream's own operators {losses['own_work_s']:.3f}, "
                          f"idle {losses['idle_s']:.3f}, before start / after end {losses['not_alive_s']:.3f}, "
                          f"between activations {losses['between_s']:.3f}")
    for r in result["results"]:
        slowdown = r.get("function_slowdown")
        if slowdown is not None:
            console.print(f"{r['config']}: per tuple the function took {slowdown['best_run']:.2f}x the plain loop's time "
                          f"in the best run (median of the runs {slowdown['median']:.2f}x)"
                          + (f"; so that run gave {r['processes']} x {r['engine_efficiency']:.0%} / "
                             f"{slowdown['best_run']:.2f} = {paired_from_parts(r):.2f}x the plain loop timed just "
                             f"before it" if "engine_efficiency" in r else ""))
    console.print(result["note"])
    console.print(f"best of {result['repeat']}; load average (1 min) {result['machine']['load_average_1min']:.2f}")

