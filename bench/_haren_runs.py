"""One measured run of ``elastream bench haren``: a set of §7.1 queries under one configuration.

Configurations: ``os`` — ``Runner(model="dedicated")``, a thread per operator scheduled by the
operating system (Haren's baseline), with the same batch size b as the Haren runs; a Haren policy
name (``fcfs``, ``hr``, ``chain``, ``multiclass``) — ``Runner(threads=K, policy=...)`` with the
policy's scheduling period P (and delay d) set for the run.

What a run reports (Haren §2's metrics): ingress throughput (tuples the sources emitted per second),
mean and max latency at the sinks (due time to arrival), per query and per class, the queued tuples
(mean of samples of every input port), the process's resident memory above its level at the start
(max of samples), cores used (process CPU seconds per wall second), and for a Haren policy the
scheduling task's overhead (:class:`~elastream.policies.haren.HarenStats`).

Threading: the caller's thread starts the run, samples it every :data:`SAMPLE_S` and shuts it down.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from time import perf_counter, process_time, sleep
from typing import Any

import elastream as es
from elastream.bench._haren_workload import BUCKET_S, QuerySpec, build_flow
from elastream.policies.haren import haren_spec, policy_for, with_parameters

SAMPLE_S = 0.25
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    """This process's resident memory (MB), from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 1e6
    except OSError:
        return 0.0


def runner_for(config: str, threads: int, period_s: float, delay_s: float | None, batch: int,
               seed: int) -> tuple[es.Runner, Any]:
    """The Runner of one configuration and its Haren policy instance (None for ``os``)."""
    if config == "os":
        return es.Runner(model="dedicated", batch_size=batch, elastic=False), None
    spec = with_parameters(haren_spec(config), period_s=period_s, batch_size=batch, delay_s=delay_s)
    policy = policy_for(spec, seed=seed)
    return es.Runner(threads=threads, policy=policy, elastic=False), policy


def measure(queries: list[QuerySpec], config: str, *, seconds: float, threads: int = 2, period_s: float = 0.1,
            delay_s: float | None = None, batch: int = 10, seed: int = 0) -> dict[str, Any]:
    """Run ``queries`` for ``seconds`` under ``config``; the metrics of the run (see the module doc)."""
    runner, policy = runner_for(config, threads, period_s, delay_s, batch, seed)
    base_rss = rss_mb()
    c0, t0 = process_time(), perf_counter()
    flow = build_flow(queries, seconds, origin=t0, seed=seed)
    handle = runner.start(flow)
    queued, peak_rss = [], base_rss
    while perf_counter() - t0 < seconds and not handle.done:
        sleep(SAMPLE_S)  # sampling period of the queues and memory
        stats = handle.stats()
        queued.append(sum(p.size for op in stats.operators.values() for p in op.inputs))
        peak_rss = max(peak_rss, rss_mb())
    stats = handle.stats()
    overhead = policy.statistics() if policy is not None else None
    wall, cpu = perf_counter() - t0, process_time() - c0
    result = handle.shutdown(timeout=30)
    sinks = {q.name: result.outputs.get(f"{q.name}.sink", {}) for q in queries}
    emitted = {q.name: stats.operators[f"{q.name}.src"].tuples_out for q in queries}
    row = {"config": config, "queries": len(queries), "threads": 1 if config == "os" else threads,
           "period_s": None if config == "os" else period_s, "seconds": seconds, "wall_s": wall,
           "cores_used": cpu / wall if wall > 0 else 0.0,
           "queued_tuples": sum(queued) / len(queued) if queued else 0.0,
           "memory_mb": peak_rss - base_rss, **latency_summary(queries, sinks, emitted, seconds)}
    row["classes"] = {k: latency_summary([q for q in queries if q.priority == k], sinks, emitted, seconds)
                      for k in sorted({q.priority for q in queries})}
    row["overhead"] = _overhead(overhead)
    return row


def latency_summary(queries: list[QuerySpec], sinks: dict[str, dict], emitted: dict[str, int],
                    seconds: float) -> dict[str, Any]:
    """Throughput, mean and max latency over ``queries``, and the max latency per time bucket."""
    count = sum(sinks[q.name].get("count", 0) for q in queries)
    total = sum(sinks[q.name].get("total_s", 0.0) for q in queries)
    series: dict[int, float] = {}
    for q in queries:
        for bucket, (_, _, worst) in sinks[q.name].get("buckets", {}).items():
            series[int(bucket)] = max(series.get(int(bucket), 0.0), worst)
    return {"throughput_tps": sum(emitted[q.name] for q in queries) / seconds, "egress": count,
            "mean_latency_s": total / count if count else None,
            "max_latency_s": max((sinks[q.name].get("max_s", 0.0) for q in queries), default=None) if count else None,
            "max_latency_series": [[b * BUCKET_S, series[b]] for b in sorted(series)]}


def _overhead(stats: Any) -> dict[str, Any] | None:
    """A Haren run's scheduling-task overhead: seconds per phase and fractions of worker time."""
    if stats is None:
        return None
    phases = ("priority", "sort", "update", "coord", "seq_update", "seq_assign", "total")
    return {**asdict(stats), "fractions": {p: stats.fraction(p) for p in phases}}


def flatness(series: list[list[float]]) -> float | None:
    """Max latency over the last third of the run ÷ over the first third (≈ 1: flat; ≫ 1: growing)."""
    if len(series) < 3:
        return None
    third = len(series) // 3
    first = max(v for _, v in series[:third])
    last = max(v for _, v in series[-third:])
    return last / first if first > 0 else None
