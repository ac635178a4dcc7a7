"""Run a flow on worker threads: :class:`Runner`, :class:`RunHandle`, :class:`RunResult`.

Example::

    result = es.Runner(threads=2, policy="random").run(flow)
    result.outputs["sink"]     # what the Collect sink gathered, in arrival order
    result.stats               # FlowStats: per operator, port and worker

    handle = es.Runner(threads=2).start(flow)
    handle.set_threads(4)      # elastic thread count while running
    handle.shutdown()          # stop early; returns within the grace period

Threading model: ``run``/``start`` and the handle's methods are called from the
user's thread; the flow runs on the pool's worker threads plus one monitor thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from elastream.errors import ElastreamError, OperatorError
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats
from elastream.ordered.partitioning import PARTITIONING_SCHEMES
from elastream.ordered.reorder import REORDER_SCHEMES
from elastream.policies.registry import create as create_policy
from elastream.runtime import gc_tuning
from elastream.runtime.compile import compile_flow
from elastream.runtime.monitor import Monitor
from elastream.runtime.scheduler import Scheduler
from elastream.runtime.snapshot import take_snapshot
from elastream.runtime.workers import WorkerPool

#: How often a caller waiting for a run looks whether every worker thread died (an engine fault); the
#: run's end wakes it at once. Rarely: each look takes the GIL from a computing worker.
WAIT_CHECK_S = 0.5


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a finished run returns."""

    outputs: dict[str, Any]
    """Sink results by operator name (e.g. the list a Collect gathered)."""
    stats: FlowStats
    elapsed_s: float
    shutdown: bool = False
    """True when the run was ended by an explicit shutdown."""


class RunHandle:
    """A flow running in the background (see :meth:`Runner.start`)."""

    def __init__(self, runner: Runner, flow: Flow):
        self.flow = flow
        self.runner = runner
        compiled = compile_flow(flow, max_queue_size=runner.max_queue_size, batch_size=runner.batch_size,
                                threads=runner.threads, reorder=runner.reorder, partitioning=runner.partitioning)
        self._tasks = compiled.tasks
        self.policy = create_policy(runner.policy, seed=runner.seed)
        self.sched = Scheduler(compiled.tasks, self.policy, shutdown_grace_s=runner.shutdown_grace_s)
        self.pool = WorkerPool(self.sched, compiled.contexts, runner.quantum_ms / 1000.0)
        self.monitor = Monitor(self.sched, runner.stats_period_ms / 1000.0)
        if getattr(self.policy, "wants_ticks", False):
            self.monitor.add_hook(lambda: self.policy.on_tick(self.stats()))
        self._started = perf_counter()
        self._ended: float | None = None
        self._result: RunResult | None = None
        self._explicit_shutdown = False
        self._gc_relaxed = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        self._started = perf_counter()
        self._gc_relaxed = gc_tuning.relax(self.runner.gc_threshold)
        self.pool.start(self.runner.threads)
        self.monitor.start()

    # -- control -------------------------------------------------------------------
    def set_threads(self, n: int) -> int:
        """Change the number of worker threads while the flow runs."""
        return self.pool.resize(n)

    @property
    def threads(self) -> int:
        """Current number of active worker threads."""
        return self.pool.active

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        """Request an explicit shutdown and wait for every worker to end."""
        self._explicit_shutdown = True
        self.sched.request_shutdown()
        return self.wait(timeout)

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the flow ends; raise OperatorError if an operator failed."""
        deadline = None if timeout is None else perf_counter() + timeout
        try:
            while not self.sched.finished.wait(wait_slice(deadline)):
                if not any(w.alive for w in self.pool.workers) and not self.sched.finished.is_set():
                    raise ElastreamError("every worker thread exited before the flow finished")
                if deadline is not None and perf_counter() >= deadline:
                    raise TimeoutError(f"flow {self.flow.name!r} still running after {timeout} s")
        except KeyboardInterrupt:
            self._explicit_shutdown = True
            self.sched.request_shutdown()
            self._finish(join_timeout=self.runner.shutdown_grace_s + 2.0)
            raise
        return self._finish(join_timeout=None if deadline is None else max(0.1, deadline - perf_counter()))

    def _finish(self, join_timeout: float | None) -> RunResult:
        with self._lock:
            if self._result is None:
                self.sched.wake_all()
                self.pool.join(join_timeout)
                if self._gc_relaxed:
                    gc_tuning.restore()
                    self._gc_relaxed = False
                self.monitor.stop()
                self.sched.poller.stop()
                self._ended = perf_counter()
                self.monitor.sample_rates()
                stats = self.stats()
                outputs = {}
                for t in self._tasks:
                    value = t.op.result()
                    if value is not None:
                        outputs[t.name] = value
                self._result = RunResult(outputs=outputs, stats=stats, elapsed_s=self._ended - self._started,
                                         shutdown=self._explicit_shutdown)
        failure = self.sched.failure
        if failure is not None:
            where, failed = failure
            raise OperatorError(where, failed.error, failed.details) from failed.error
        return self._result

    # -- observation ------------------------------------------------------------------
    def stats(self) -> FlowStats:
        """A statistics snapshot (safe while running)."""
        return take_snapshot(self.sched, self.pool, self._started, getattr(self.policy, "name", "?"))

    @property
    def done(self) -> bool:
        """True once every operator has completed."""
        return self.sched.finished.is_set()

    def states(self) -> dict[str, str]:
        """Operator name → scheduling state."""
        return self.sched.snapshot_states()


def wait_slice(deadline: float | None, longest: float = WAIT_CHECK_S) -> float:
    """How long a waiting caller sleeps before its next look: ``longest``, or less when ``deadline`` comes first.

    Example: ``wait_slice(None)`` → 0.5; ``wait_slice(perf_counter() + 0.1)`` → about 0.1.
    """
    return longest if deadline is None else min(longest, max(0.0, deadline - perf_counter()))


class Runner:
    """Runs flows on a pool of worker threads with a scheduling policy.

    Parameters follow DESIGN.md: ``threads``, ``processes``, ``policy`` (a name
    from ``es.policies.available()`` or an instance), ``max_queue_size`` (tuples
    per input port), ``quantum_ms`` (preemption quantum, C-Stream's 50 ms),
    ``elastic``, plus ``batch_size`` (most tuples a function operator takes
    per step) and ``seed`` (for seeded policies). ``reorder`` / ``partitioning``
    choose the order-keeping schemes of dynamic allotment; ``replicas``
    (``{operator: count}`` or ``"auto"``) runs stateless or partitioned
    operators as ordered split → replicas → merge, placed over the processes.
    ``start_method`` starts worker processes: ``"forkserver"`` (default) forks
    them from a server that has imported the engine once (a worker is ready in
    ~10-20 ms, and sees the environment of the moment it starts, as with
    spawn); ``"spawn"`` starts a fresh interpreter per worker (~0.3-0.5 s).
    ``gc_threshold`` is the garbage collector's young-generation threshold while
    a run is on, in this process and in the worker processes (CPython's default
    700 makes a stream walk its in-flight tuples again every few hundred
    allocations; see :mod:`elastream.runtime.gc_tuning`); None leaves it alone.
    ``replica_window_ms`` is how much work (ms of its own time) a replica may
    have in hand (0.6 of it for a replica in its split's process), with
    pieces of a fifth of it: the latency a replicated operator adds at full
    load, traded against per-piece costs (default None: 200 ms, 40 ms pieces).
    """

    def __init__(self, threads: int = 1, processes: int = 1, policy: Any = "least_recently_run",
                 max_queue_size: int = 1024, quantum_ms: float = 50.0, elastic: bool = False,
                 batch_size: int = 256, seed: int | None = None, stats_period_ms: float = 100.0,
                 shutdown_grace_s: float = 1.0, placement: Any = "auto", start_method: str = "forkserver",
                 ring_bytes: int = 4 << 20, reorder: str = "nonblocking", partitioning: str = "hybrid",
                 replicas: Any = None, gc_threshold: int | None = gc_tuning.RUN_THRESHOLD,
                 replica_window_ms: float | None = None):
        if threads < 1:
            raise ValueError("threads must be >= 1")
        if max_queue_size < 1:
            raise ValueError("max_queue_size must be >= 1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if processes < 1:
            raise ValueError("processes must be >= 1")
        if start_method not in ("spawn", "forkserver"):
            raise ValueError("start_method must be 'spawn' or 'forkserver' (fork is unsafe with threads)")
        if reorder not in REORDER_SCHEMES:
            raise ValueError(f"unknown reorder scheme {reorder!r}; choose one of {', '.join(REORDER_SCHEMES)}")
        if partitioning not in PARTITIONING_SCHEMES:
            raise ValueError(f"unknown partitioning scheme {partitioning!r}; "
                             f"choose one of {', '.join(PARTITIONING_SCHEMES)}")
        if not (replicas is None or replicas == "auto" or isinstance(replicas, dict)):
            raise ValueError(f"replicas must be None, 'auto' or {{operator: count}}, got {replicas!r}")
        if replica_window_ms is not None and not replica_window_ms > 0:
            raise ValueError("replica_window_ms must be > 0 (or None for the engine's default)")
        if gc_threshold is not None and gc_threshold < 1:
            raise ValueError("gc_threshold must be >= 1 (or None to leave the collector alone)")
        if elastic:
            raise NotImplementedError("elastic=True needs the elasticity controllers, not built yet")
        self.threads = threads
        self.processes = processes
        self.policy = policy
        self.max_queue_size = max_queue_size
        self.quantum_ms = quantum_ms
        self.elastic = elastic
        self.batch_size = batch_size
        self.seed = seed
        self.stats_period_ms = stats_period_ms
        self.shutdown_grace_s = shutdown_grace_s
        self.placement = placement
        self.start_method = start_method
        self.ring_bytes = ring_bytes
        self.reorder = reorder
        self.partitioning = partitioning
        #: Operators run as ordered split → replicas → merge (C-Stream §4.2): {name: count} or "auto".
        self.replicas = replicas
        self.gc_threshold = gc_threshold
        #: Work (ms) a replica in another process than its split may have in hand: the latency a
        #: replicated operator adds at full load; the split's pieces are a fifth of it.
        self.replica_window_ms = None if replica_window_ms is None else float(replica_window_ms)
        create_policy(policy, seed=seed)  # fail fast on an unknown name

    @property
    def replica_window_s(self) -> float | None:
        """``replica_window_ms`` in seconds (None: the engine's default)."""
        return None if self.replica_window_ms is None else self.replica_window_ms / 1000.0

    def child_options(self) -> dict[str, Any]:
        """Runner keyword arguments for one worker process of a multi-process run."""
        return {"threads": self.threads, "policy": self.policy, "max_queue_size": self.max_queue_size,
                "quantum_ms": self.quantum_ms, "batch_size": self.batch_size, "seed": self.seed,
                "stats_period_ms": self.stats_period_ms, "shutdown_grace_s": self.shutdown_grace_s,
                "reorder": self.reorder, "partitioning": self.partitioning, "gc_threshold": self.gc_threshold}

    def assignment(self, flow: Flow) -> dict[str, int]:
        """Operator name → worker process, from ``placement``.

        ``placement`` is "auto" (TurboStream §V offline plan from the graph and
        declared costs), "round_robin", a PlacementPlan, a dict, or the
        FlowStats of an earlier run of the same flow (online mode: measured
        traffic and CPU time per operator, re-placed between runs as
        TurboStream's stop-and-restart does).
        """
        p = self.placement
        if isinstance(p, dict):
            return dict(p)
        if hasattr(p, "assignment"):
            return dict(p.assignment)
        from elastream.placement import PlacementGraph, place, round_robin

        if isinstance(p, FlowStats):
            return dict(place(PlacementGraph.from_stats(p), self.processes).assignment)
        graph = PlacementGraph.from_flow(flow)
        if p == "auto":
            return dict(place(graph, self.processes).assignment)
        if p == "round_robin":
            return dict(round_robin(graph, self.processes).assignment)
        raise ValueError(f"unknown placement {p!r}: use 'auto', 'round_robin', a PlacementPlan or a dict")

    def start(self, flow: Flow) -> RunHandle:
        """Validate, compile and start ``flow``; return its handle at once."""
        if self.processes > 1:
            from elastream.processes.supervisor import ProcessRunHandle

            flow.validate()  # before placement, which assumes a valid graph
            return ProcessRunHandle(self, flow, self.assignment(flow))  # type: ignore[return-value]
        if isinstance(self.replicas, dict) and self.replicas:
            from elastream.processes.replicate import replicate_flow

            flow.validate()
            flow = replicate_flow(flow, self.replicas, reorder=self.reorder, window_s=self.replica_window_s)
        handle = RunHandle(self, flow)
        handle._start()
        return handle

    def run(self, flow: Flow, timeout: float | None = None) -> RunResult:
        """Run ``flow`` to completion and return its result.

        With ``timeout`` (seconds), a flow still running then is shut down and
        TimeoutError is raised.
        """
        handle = self.start(flow)
        try:
            return handle.wait(timeout)
        except TimeoutError:
            handle.shutdown(timeout=self.shutdown_grace_s + 3.0)
            raise
