"""The main job behind ``elastream demo``: TPCx-BB on Spark and on elastream, checked against each other.

1. **Data** (Spark): a small TPCx-BB data set written by the PySpark job of
   :mod:`elastream.spark.datagen`, cached under :func:`demo_data_dir` and
   generated again only when its description file is missing (a half-written
   set has none).
2. **Reference** (Spark): the five queries as Spark SQL batch queries
   (:mod:`elastream.spark.batch`).
3. **Streaming** (elastream): the five §5 pipelines on the local engine
   (:mod:`elastream.tpcxbb.local`), each reporting its progress while it runs.
4. **Check**: every local answer against its batch answer
   (:func:`elastream.tpcxbb.answers.answer_difference`).

The caller supplies the displays through :class:`DemoHooks`, so this module
stays free of terminal code and the CLI, tests and benchmarks can share it.

Example::

    result = run_demo(DemoOptions(scale=0.01, threads=2))
    all(row.match for row in result.rows)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastream.tpcxbb.params import Q01Params, default_params
from elastream.workloads.demo import cache_dir

QUERIES = ("q01", "q02", "q03", "q04", "q15")
#: Q1 with the kit's threshold (> 50 tickets) is empty on a small data set; > 2 keeps a few dozen pairs.
DEMO_Q01_THRESHOLD = 2


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``elastream demo`` runs: data size and the local engine's settings."""

    scale: float = 0.05
    seed: int = 0
    threads: int = 2
    processes: int = 1
    policy: str = "least_recently_run"
    master: str | None = None
    queries: tuple[str, ...] = QUERIES


@dataclass(frozen=True, slots=True)
class DemoRow:
    """One query's local run, compared with its Spark batch answer."""

    query: str
    rows: int
    seconds: float
    input_rows: int
    tuples_per_second: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    batch_seconds: float
    difference: str | None

    @property
    def match(self) -> bool:
        """True when the local answer equals the batch answer (spec's rounding rules)."""
        return self.difference is None

    def summary(self) -> dict[str, Any]:
        """The row as a JSON-ready dict."""
        return dataclasses.asdict(self) | {"match": self.match}


@dataclass(slots=True)
class DemoResult:
    """Everything the demo measured."""

    data_dir: Path
    generated: bool
    datagen_seconds: float
    rows: list[DemoRow] = field(default_factory=list)

    @property
    def all_match(self) -> bool:
        """True when every local answer equals its batch answer."""
        return bool(self.rows) and all(r.match for r in self.rows)

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object of ``elastream demo``."""
        return {"demo": "tpcxbb", "data": str(self.data_dir), "generated": self.generated,
                "datagen_seconds": self.datagen_seconds, "all_match": self.all_match,
                "queries": [r.summary() for r in self.rows]}


@dataclass(slots=True)
class DemoHooks:
    """Callbacks for displays; every one is optional.

    * ``datagen(spark) -> context manager`` wraps the Spark data generation
      (e.g. a :class:`~elastream.spark.progress.StageProgress`) and is
      passed as ``progress`` to :func:`~elastream.spark.datagen.generate`;
    * ``phase(text)`` announces a step;
    * ``local_started(query, total_rows, handle)`` is called when a local run
      starts (``handle.stats()`` gives live statistics) and
      ``local_finished(row)`` when it has been checked.
    """

    datagen: Callable[[Any], Any] | None = None
    phase: Callable[[str], None] | None = None
    local_started: Callable[[str, int, Any], None] | None = None
    local_finished: Callable[[DemoRow], None] | None = None


def demo_data_dir(scale: float, seed: int) -> Path:
    """Where the demo keeps the data set of ``scale`` and ``seed`` (under :func:`cache_dir`)."""
    return cache_dir() / f"tpcxbb-sf{scale:g}-seed{seed}"


def demo_params(query: str) -> Any:
    """The parameters the demo uses: the spec §3 defaults, with Q1's threshold lowered for small data."""
    if query == "q01":
        return Q01Params(viewed_together_count=DEMO_Q01_THRESHOLD)
    return default_params(query)


def ensure_data(options: DemoOptions, spark: Any, hooks: DemoHooks) -> tuple[Path, bool, float]:
    """The cached data set, generated on Spark if absent: ``(folder, generated now, seconds)``."""
    from elastream.spark.datagen import META_FILE, generate

    out = demo_data_dir(options.scale, options.seed)
    if (out / META_FILE).exists():
        return out, False, 0.0
    _announce(hooks, f"generating TPCx-BB SF {options.scale:g} (seed {options.seed}) on Spark into {out}")
    if hooks.datagen is None:
        result = generate(out, options.scale, options.seed, spark=spark)
    else:
        with hooks.datagen(spark) as progress:
            result = generate(out, options.scale, options.seed, spark=spark, progress=progress)
    return out, True, result.seconds


def run_demo(options: DemoOptions, hooks: DemoHooks | None = None) -> DemoResult:
    """Generate (or reuse) the data, answer every query on Spark and on elastream, compare them."""
    from elastream.spark.batch import run_batch
    from elastream.spark.session import get_session

    hooks = hooks or DemoHooks()
    spark = get_session(options.master)
    data_dir, generated, datagen_s = ensure_data(options, spark, hooks)
    result = DemoResult(data_dir, generated, datagen_s)
    _announce(hooks, "reference answers: Spark SQL batch queries")
    batch = {q: run_batch(q, data_dir, demo_params(q), spark) for q in options.queries}
    _announce(hooks, f"streaming: the §5 pipelines on elastream ({options.threads} threads, "
                     f"{options.processes} process{'es' if options.processes > 1 else ''}, policy {options.policy})")
    for query in options.queries:
        row = run_local(query, data_dir, options, batch[query], hooks)
        result.rows.append(row)
        if hooks.local_finished is not None:
            hooks.local_finished(row)
    return result


def run_local(query: str, data_dir: Path, options: DemoOptions, reference: Any, hooks: DemoHooks) -> DemoRow:
    """One query on the local engine, compared with its batch answer ``reference`` (a QueryRun)."""
    from elastream.tpcxbb.answers import answer_difference
    from elastream.tpcxbb.local import run_query

    started = hooks.local_started
    on_start = None if started is None else (lambda rows, handle: started(query, rows, handle))
    run = run_query(query, data_dir, demo_params(query),
                    {"threads": options.threads, "processes": options.processes, "policy": options.policy,
                     "on_start": on_start})
    return DemoRow(query=query, rows=run.answer.num_rows, seconds=run.seconds, input_rows=run.input_rows,
                   tuples_per_second=run.tuples_per_second, latency_p50_ms=run.latency_p50_ms,
                   latency_p99_ms=run.latency_p99_ms, batch_seconds=reference.seconds,
                   difference=answer_difference(query, reference.answer, run.answer))


def _announce(hooks: DemoHooks, text: str) -> None:
    if hooks.phase is not None:
        hooks.phase(text)
