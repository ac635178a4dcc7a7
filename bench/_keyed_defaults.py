"""The keyed benchmark's rows as a user writes them: plain ``es.Runner()`` and ``es.Runner(processes=2)``.

No replicas, no placement, no partitions given: whatever speed these reach comes from the
defaults (elasticity holding worker processes ready, DS2 adding replicas, the splits moving
key groups). Each row is timed in the same repetitions as the hand-tuned ``elastream P=2`` row
and reported as a share of it (issue goal: at least 0.9).

Example::

    seconds, outputs = run_default(data, rounds, "Runner()")
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import elastream as es

#: Row label → how the user writes the runner.
DEFAULT_RUNNERS = {
    "Runner()": lambda: es.Runner(),
    "Runner(processes=2)": lambda: es.Runner(processes=2),
}


def default_flow(data: list[tuple[int, int]], rounds: int) -> es.Flow:
    """The benchmark's flow as a user writes it: ``key_by(key)`` with the default key groups."""
    from elastream.bench.keyed import add_burned, key_of

    flow = es.Flow("keyed")
    (flow.source(es.ops.FromIterable(data), name="src")
         .key_by(key_of)
         .reduce(partial(add_burned, rounds), initial=int, name="sum")
         .sink(es.ops.Collect(), name="out"))
    return flow


def run_default(data: list[tuple[int, int]], rounds: int, label: str) -> tuple[float, list]:
    """One timed run of the row ``label``; returns (seconds, outputs)."""
    runner = DEFAULT_RUNNERS[label]()
    flow = default_flow(data, rounds)
    t0 = time.perf_counter()
    result = runner.run(flow, timeout=600)
    return time.perf_counter() - t0, result.outputs["out"]


def default_rows(best: dict[str, float], plain: float, tuples: int, paired: Any) -> list[dict[str, Any]]:
    """The rows of the default runners, each with its share of the hand-tuned ``elastream P=2`` run."""
    tuned = best.get("p2")
    rows = []
    for label in DEFAULT_RUNNERS:
        if label not in best:
            continue
        s = best[label]
        rows.append({"config": label, "processes": None, "seconds": s, "tuples_per_s": tuples / s,
                     "speedup_vs_plain": plain / s, "speedup_paired": paired(label), "output_equal": True,
                     "share_of_hand_tuned_p2": tuned / s if tuned else None})
    return rows
