"""Backends by name: each starts a flow for a :class:`~elastream.runtime.config.RunConfig` and returns a RunHandle.

* ``threads`` — :func:`elastream.runtime.engine.start_threads` on this process's worker threads,
  after the replica graph pass when ``replicas`` names operators;
* ``processes`` — :class:`elastream.processes.supervisor.ProcessRunHandle`: parts of the flow
  on worker processes joined by shared-memory rings, placed by the placement plug-in;
* ``spark`` — :func:`elastream.spark.backend.start_spark`: a flow of declared operators as
  one Spark Structured Streaming query.

Backends are imported when first used, so a threads run never loads the process
or Spark machinery. Threading: called from the thread that starts a run.
"""

from __future__ import annotations

from collections.abc import Callable

from elastream.graph.flow import Flow
from elastream.runtime.config import RunConfig
from elastream.runtime.handle import RunHandle

Backend = Callable[[Flow, RunConfig], RunHandle]


def start_on_threads(flow: Flow, config: RunConfig) -> RunHandle:
    """One process, ``config.threads`` worker threads; named replicas run as split → replicas → merge."""
    from elastream.runtime.engine import start_threads

    if config.replicas == "auto":
        raise ValueError("replicas='auto' spreads replicas over worker processes: ask for processes=2 or more, "
                         "or name counts with replicas={operator: count}")
    if config.replicas:
        from elastream.ordered.replicate import replicate_flow

        flow = replicate_flow(flow, dict(config.replicas), reorder=config.ordering.reorder,  # type: ignore[arg-type]
                              window_s=config.ordering.replica_window_s)
    return start_threads(flow, config)


def start_on_processes(flow: Flow, config: RunConfig) -> RunHandle:
    """Parts of the flow on ``config.processes`` processes (part 0 in this one), placed by the placement plug-in."""
    from elastream.placement.choose import resolve_assignment
    from elastream.processes.supervisor import ProcessRunHandle

    return ProcessRunHandle(flow, config, resolve_assignment(config.placement, flow, config.processes))


def start_on_spark(flow: Flow, config: RunConfig) -> RunHandle:
    """The flow as one Spark Structured Streaming query (declared operators only)."""
    from elastream.spark.backend import start_spark

    return start_spark(flow, config)


#: Backend name → how it starts a flow.
BACKENDS: dict[str, Backend] = {"threads": start_on_threads, "processes": start_on_processes,
                                "spark": start_on_spark}


def register_backend(name: str, start: Backend) -> None:
    """Make ``Runner(backend=name)`` start flows with ``start(flow, config)``."""
    BACKENDS[name] = start
