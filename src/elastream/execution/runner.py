"""``es.Runner``: the one way to run a flow, whatever the backend.

Example::

    result = es.Runner(threads=2, policy="random").run(flow)
    result.outputs["sink"]     # what the Collect sink gathered, in arrival order
    result.stats               # FlowStats: per operator, port and worker

    handle = es.Runner(processes=2).start(flow)
    handle.set_threads(2)      # while running
    handle.shutdown()          # stop early; returns within the grace period

Threading: ``run`` / ``start`` are called from the user's thread.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from elastream.elastic.config import elastic_from
from elastream.elastic.loop import Fixed
from elastream.elastic.run import start_elastic
from elastream.errors import OperatorError
from elastream.graph.flow import Flow
from elastream.policies.registry import create as create_policy
from elastream.runtime import gc_tuning
from elastream.runtime.config import (GC_THRESHOLD_ENV, OrderingConfig, ProcessConfig, RunConfig, SchedulingConfig,
                                      gc_threshold_from_env)
from elastream.runtime.handle import RunHandle, RunResult

#: Options that moved into a config group, with their new spelling (a call with the old one fails, saying it).
RENAMED = {
    **{name: f"scheduling=es.SchedulingConfig({name}=...)"
       for name in ("stats_period_ms", "shutdown_grace_s")},
    **{name: f"ordering=es.OrderingConfig({name}=...)" for name in ("reorder", "partitioning", "replica_window_ms")},
    **{name: f"process_options=es.ProcessConfig({name}=...)"
       for name in ("start_method", "ring_bytes", "ring_in_flight_bytes")},
    "gc_threshold": f"the {GC_THRESHOLD_ENV} environment variable (an internal default otherwise)",
}


class Runner:
    """Runs flows: on worker threads, on worker processes, or on Spark.

    ``threads``: worker threads per process; ``processes``: worker processes (part of the flow
    runs in this one); ``policy``: a scheduling policy's name from ``es.policies.available()`` or
    an instance, with ``seed`` for seeded policies; ``max_queue_size``: tuples per input port;
    ``quantum_ms``: the preemption quantum (C-Stream's 50 ms); ``batch_size``: most tuples a function
    operator takes per activation (Haren's budget). ``replicas``: ``{operator: count}``
    runs stateless or partitioned operators as ordered split → replicas → merge (C-Stream §4.2),
    or "auto" (with processes > 1: the operators that dominate the cost get one replica per
    process). ``placement``: "auto" (TurboStream §V), "round_robin", a plan, a dict, or an earlier
    run's FlowStats. ``backend``: "auto" (threads, or processes when ``processes > 1``),
    "threads", "processes" or "spark". The rarely used knobs live in ``scheduling``,
    ``ordering`` and ``process_options`` (:mod:`elastream.runtime.config`). ``elastic``: True (the
    default) sizes the levels the caller did not give while the flow runs — ``threads`` and
    ``processes`` given fix theirs —, False turns that off, ``es.Elastic(...)`` tunes it.
    ``model``: the threading model (IBM Streams §2.2) — "dynamic" (the default: the worker pool,
    elastic unless counts are given), "dedicated" (one thread per operator, each blocking on its own
    input; no policy, no elasticity) or "manual" (one thread runs the whole flow, fused wide:
    stateful operators and sinks join their chains, so fewer queues remain; no elasticity).
    """

    def __init__(self, threads: int | None = None, processes: int | None = None,
                 policy: Any = "least_recently_run", *,
                 max_queue_size: int = 2048, quantum_ms: float = 50.0, batch_size: int = 512, seed: int | None = None,
                 replicas: Any = None, placement: Any = "auto", backend: str = "auto", elastic: Any = True,
                 scheduling: SchedulingConfig | None = None, ordering: OrderingConfig | None = None,
                 process_options: ProcessConfig | None = None, model: str = "dynamic", **renamed: Any):
        for name in renamed:
            if name in RENAMED:
                raise TypeError(f"Runner({name}=...) has moved: use {RENAMED[name]}")
            raise TypeError(f"Runner() got an unexpected keyword argument {name!r}")
        _check_model(model, threads, elastic, backend)
        self.elastic = elastic_from(elastic) if model == "dynamic" else None
        self.fixed = Fixed(threads=threads is not None, processes=processes is not None)
        self.config = RunConfig(
            threads=1 if threads is None else threads, processes=1 if processes is None else processes, policy=policy, seed=seed, max_queue_size=max_queue_size,
            quantum_ms=quantum_ms, batch_size=batch_size, backend=backend, replicas=replicas, placement=placement,
            scheduling=scheduling or SchedulingConfig(), ordering=ordering or OrderingConfig(),
            process=process_options or ProcessConfig(),
            gc_threshold=gc_threshold_from_env(gc_tuning.RUN_THRESHOLD), model=model)
        create_policy(policy, seed=seed)  # fail fast on an unknown name

    @property
    def threads(self) -> int:
        return self.config.threads

    @property
    def processes(self) -> int:
        return self.config.processes

    def assignment(self, flow: Flow) -> dict[str, int]:
        """Operator name → worker process, from ``placement`` (the placement plug-in)."""
        from elastream.placement.choose import resolve_assignment

        return resolve_assignment(self.config.placement, flow, self.config.processes)

    def start(self, flow: Flow) -> RunHandle:
        """Validate ``flow`` and start it on the chosen backend; return its handle at once."""
        from elastream.execution.backends import BACKENDS

        flow.validate()
        fixed = self._fixed_levels()
        run_flow, config, replicas = self._elastic_units(flow, fixed)
        handle = BACKENDS[config.backend_name](run_flow, config)
        if self.elastic is None or config.backend_name == "spark":
            return handle
        # Replicas held ready with the processes free means the processes are held too (elastic.held).
        held = config.active_replicas is not None and not fixed.processes
        return start_elastic(handle, self.elastic, threads=config.threads, processes=config.processes,
                             fixed=fixed, replicas=replicas, held=held, bypassed=bool(config.bypass),
                             written=list(flow.operators) if config is not self.config else None)

    def _fixed_levels(self) -> Fixed:
        """What the elastic loop may not change; read here, on the caller's thread, where the main
        script's frame shows whether worker processes could re-import it safely."""
        from elastream.processes.main_guard import MAIN_GUARD_HINT, main_is_guarded, reimports_main

        if self.fixed.processes or not reimports_main(self.config.process.start_method) or main_is_guarded():
            return self.fixed
        return dataclasses.replace(self.fixed, processes_hint=f"this flow would run faster on more processes; "
                                                              f"{MAIN_GUARD_HINT}")

    def _elastic_units(self, flow: Flow, fixed: Fixed) -> tuple[Flow, RunConfig, Any]:
        """The flow and config to run, and the replicas taking work per unit (:mod:`elastream.elastic.units`).

        With neither threads nor processes given (``Runner()``), an elastic run holds worker processes
        ready (:mod:`elastream.elastic.held`); ``Runner(threads=k)`` stays in one process; with processes
        given and nothing else, each replication unit runs where a static plan puts it, with a replica
        held ready in every other process (``placed_plan``).
        """
        config = self.config
        if (self.elastic is None or config.replicas is not None or not _policy_fuses(config.policy)
                or not (isinstance(config.placement, str) and config.placement == "auto")):
            return flow, config, config.replicas
        if config.backend == "auto" and not (fixed.processes or fixed.threads) and fixed.processes_hint is None:
            from elastream.elastic.held import held_plan

            plan = held_plan(flow, config, self.elastic)
            return (flow, config, None) if plan is None else (plan.flow, plan.config, plan.replicas)
        if config.backend_name != "processes":
            return flow, config, None
        from elastream.elastic.held import placed_plan

        plan = placed_plan(flow, config)
        return (flow, config, None) if plan is None else (plan.flow, plan.config, plan.replicas)

    def run(self, flow: Flow, timeout: float | None = None) -> RunResult:
        """Run ``flow`` to completion and return its result.

        With ``timeout`` (seconds), a flow still running then is shut down and TimeoutError is raised.
        """
        handle = self.start(flow)
        try:
            return handle.wait(timeout)
        except TimeoutError:
            handle.shutdown(timeout=self.config.scheduling.shutdown_grace_s + 3.0)
            raise
        except OperatorError as error:
            # The error's cause holds the user's traceback: the backend's frames would only bury it.
            raise error.with_traceback(None)


def _check_model(model: str, threads: int | None, elastic: Any, backend: str) -> None:
    """Fail at once on a threading model that conflicts with the other options, saying what to change."""
    if model == "dynamic":
        return
    if model == "manual" and threads not in (None, 1):
        raise ValueError(f"Runner(model='manual', threads={threads}): the manual model runs the whole flow on one "
                         "thread; leave threads out, or use model='dynamic'")
    if model == "dedicated" and threads is not None:
        raise ValueError(f"Runner(model='dedicated', threads={threads}): the dedicated model runs one thread per "
                         "operator; leave threads out, or use model='dynamic'")
    if elastic is not True and elastic is not False and elastic is not None:
        raise ValueError(f"Runner(model={model!r}, elastic=...): only the dynamic model is elastic")
    if backend == "spark":
        raise ValueError(f"Runner(model={model!r}, backend='spark'): Spark runs its own executors; "
                         "threading models apply to the threads and processes backends")


def _policy_fuses(policy: Any) -> bool:
    """False for a policy that schedules every operator on its own (Haren's): the elastic units, which fuse
    chains into one operator each, would hide its operators (and their query tags) from it."""
    from elastream.policies.registry import policy_class

    return getattr(policy_class(policy) if isinstance(policy, str) else policy, "fuses", True)
