"""What a run is asked to be: small frozen configs every backend reads.

``es.Runner(...)`` keeps the common calls short (``Runner()``,
``Runner(threads=2)``, ``Runner(processes=2)``); the rarely used knobs live in
three small groups, each a frozen value checked when it is made:

* :class:`SchedulingConfig` — the engine's statistics period, shutdown grace and operator fusion;
* :class:`OrderingConfig` — how ordered parallelism keeps order (the reorder
  buffer and partitioned-queue schemes of ordered-multicore §3–4, and the work
  a replica may have in hand, C-Stream §4.2);
* :class:`ProcessConfig` — how worker processes start and the size of their
  shared-memory rings (TurboStream §IV).

:class:`RunConfig` is the whole request one backend receives. The garbage
collector threshold during a run is an internal default
(:data:`GC_THRESHOLD_ENV` overrides it).

Threading: immutable values, made in the user's thread and pickled to worker
processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from elastream.ordered.partitioning import PARTITIONING_SCHEMES
from elastream.ordered.reorder import REORDER_SCHEMES

#: Environment variable that sets the young-generation GC threshold during runs ("off": leave it alone).
GC_THRESHOLD_ENV = "ELASTREAM_GC_THRESHOLD"
#: Threading models ``Runner(model=...)`` knows (IBM Streams §2.2): the worker pool, a thread per operator,
#: one thread for the whole flow.
MODELS = ("dynamic", "dedicated", "manual")
#: Backends ``Runner(backend=...)`` knows; "auto" picks threads or processes from ``processes``.
BACKENDS = ("auto", "threads", "processes", "spark")
START_METHODS = ("forkserver", "spawn")


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    """How the engine schedules within one process.

    ``stats_period_ms``: the period of the statistics snapshot; ``shutdown_grace_s``: how long a
    shutdown waits for operators before closing them; ``fuse``: run each chain of consecutive
    stateless function operators as one task (:mod:`elastream.runtime.fusion`; statistics still
    list every operator). Benchmarks that rank scheduling policies on operators turn it off.

    Example: ``es.Runner(scheduling=es.SchedulingConfig(stats_period_ms=50, fuse=False))``
    """

    stats_period_ms: float = 100.0
    shutdown_grace_s: float = 1.0
    fuse: bool = True

    def __post_init__(self) -> None:
        if not self.stats_period_ms > 0:
            raise ValueError("stats_period_ms must be > 0")
        if self.shutdown_grace_s < 0:
            raise ValueError("shutdown_grace_s must be >= 0")


@dataclass(frozen=True, slots=True)
class OrderingConfig:
    """How ordered parallelism keeps order.

    ``reorder``: the reorder buffer of dynamic allotment ("nonblocking", ordered-multicore Fig. 4,
    or "lock", Fig. 2); ``partitioning``: the partitioned operators' input ("hybrid", Fig. 7, or
    "partitioned", §4.2); ``replica_window_ms``: the work (ms of its own time) a replica may have
    in hand, the latency a replicated operator adds at full load (None: the engine's 200 ms).

    Example: ``es.Runner(threads=4, ordering=es.OrderingConfig(reorder="lock"))``
    """

    reorder: str = "nonblocking"
    partitioning: str = "hybrid"
    replica_window_ms: float | None = None

    def __post_init__(self) -> None:
        if self.reorder not in REORDER_SCHEMES:
            raise ValueError(f"unknown reorder scheme {self.reorder!r}; choose one of {', '.join(REORDER_SCHEMES)}")
        if self.partitioning not in PARTITIONING_SCHEMES:
            raise ValueError(f"unknown partitioning scheme {self.partitioning!r}; "
                             f"choose one of {', '.join(PARTITIONING_SCHEMES)}")
        if self.replica_window_ms is not None and not self.replica_window_ms > 0:
            raise ValueError("replica_window_ms must be > 0 (or None for the engine's default)")

    @property
    def replica_window_s(self) -> float | None:
        """``replica_window_ms`` in seconds (None: the engine's default)."""
        return None if self.replica_window_ms is None else self.replica_window_ms / 1000.0


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    """How worker processes start and talk.

    ``start_method``: "forkserver" (default: workers fork from a server that imported the engine
    once, ready in tens of ms) or "spawn" (a fresh interpreter each); ``ring_bytes``: the size of
    each shared-memory ring between two processes; ``ring_in_flight_bytes``: what a process sends into
    a ring before it waits for the other to take some (the ring's whole size for one big record).

    Example: ``es.Runner(processes=2, process_options=es.ProcessConfig(start_method="spawn"))``
    """

    start_method: str = "forkserver"
    ring_bytes: int = 4 << 20
    ring_in_flight_bytes: int = 256 << 10
    """Back-pressure between processes, like a port's capacity within one: a 4 MB ring held some 140,000
    small tuples, so a source ran seconds ahead of a slower process downstream (C-Stream Fig. 11 on
    two processes: 100,000 tuples in the rings for the whole run, 430,000 in one IBM Fig. 10 run)."""

    def __post_init__(self) -> None:
        if self.start_method not in START_METHODS:
            raise ValueError("start_method must be 'spawn' or 'forkserver' (fork is unsafe with threads)")
        if self.ring_bytes < 4096:
            raise ValueError("ring_bytes must be >= 4096")
        if self.ring_in_flight_bytes < 1:
            raise ValueError("ring_in_flight_bytes must be >= 1")


def gc_threshold_from_env(default: int | None) -> int | None:
    """The GC threshold runs use: :data:`GC_THRESHOLD_ENV` if set ("off": None), else ``default``."""
    raw = os.environ.get(GC_THRESHOLD_ENV, "").strip()
    if not raw:
        return default
    if raw.lower() in ("off", "none", "0"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{GC_THRESHOLD_ENV}={raw!r}: give a positive integer or 'off'") from None
    if value < 1:
        raise ValueError(f"{GC_THRESHOLD_ENV}={raw!r}: give a positive integer or 'off'")
    return value


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The whole request a backend receives (``Runner`` builds it; a worker process gets its own copy).

    ``replicas`` is ``{operator: count}`` or "auto"; ``placement`` names a placement plug-in
    ("auto", "round_robin"), or is a plan, a dict, or an earlier run's FlowStats.
    """

    threads: int = 1
    processes: int = 1
    policy: Any = "least_recently_run"
    seed: int | None = None
    max_queue_size: int = 2048
    quantum_ms: float = 50.0
    batch_size: int = 512
    """Most tuples a function operator takes per activation (Haren's budget ``b`` of ``run(b)``). 512 (with
    2,048-tuple ports): the 12 identity maps of ``bench overhead`` on one thread reach 0.87-0.90 of the
    unrolled loop against 0.77-0.81 with 256 / 1,024; a light load's batches are short either way."""
    backend: str = "auto"
    replicas: Mapping[str, int] | str | None = None
    placement: Any = "auto"
    active_replicas: Mapping[str, tuple[int, ...]] | None = None
    """Per replicated operator, the replicas that take work from the start; the others are held ready
    for an elastic run to add (None: all take work)."""
    bypass: tuple[Any, ...] = ()
    """Held units (:class:`~elastream.runtime.bypass.BypassSpec`) that run unreplicated, split and merge
    aside, until their first replica joins (the part that hosts their split installs them)."""
    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)
    ordering: OrderingConfig = field(default_factory=OrderingConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    gc_threshold: int | None = None
    model: str = "dynamic"
    """The threading model (:data:`MODELS`): "dynamic" the worker pool, "dedicated" one thread per
    operator (:mod:`elastream.runtime.dedicated`), "manual" one thread running the flow fused wide."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError("threads must be >= 1")
        if self.processes < 1:
            raise ValueError("processes must be >= 1")
        if self.max_queue_size < 1:
            raise ValueError("max_queue_size must be >= 1")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not self.quantum_ms > 0:
            raise ValueError("quantum_ms must be > 0")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if not (self.replicas is None or self.replicas == "auto" or isinstance(self.replicas, Mapping)):
            raise ValueError(f"replicas must be None, 'auto' or {{operator: count}}, got {self.replicas!r}")
        if self.gc_threshold is not None and self.gc_threshold < 1:
            raise ValueError("gc_threshold must be >= 1 (or None to leave the collector alone)")

    @property
    def backend_name(self) -> str:
        """The backend that runs this config: ``backend``, with "auto" resolved from ``processes``."""
        if self.backend != "auto":
            return self.backend
        return "processes" if self.processes > 1 else "threads"

    def for_part(self) -> RunConfig:
        """The config one process's part of a multi-process run starts its own engine with."""
        return replace(self, processes=1, backend="threads", replicas=None, placement="auto", active_replicas=None)
