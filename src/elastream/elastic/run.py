"""An elastic run: any backend's handle with an :class:`~elastream.elastic.loop.ElasticLoop` beside it.

:class:`ElasticRunHandle` is a :class:`~elastream.runtime.handle.RunHandle`
that forwards everything to the backend's handle, starts the loop with the
run and stops it (joining its thread) when the run ends, however it ends; its
``RunResult`` carries the loop's timeline (``result.timeline``).

Threading: the handle's methods are called from the user's thread; the loop runs on its own.

Example::

    handle = es.Runner().start(flow)      # elastic by default
    result = handle.wait()
    result.timeline.to_json()["entries"][0]["levels"]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import psutil

from elastream.elastic.config import Elastic
from elastream.elastic.controller import Machine, available_cores, create_controller
from elastream.elastic.fusion_rule import FusionPlan
from elastream.elastic.held import as_written
from elastream.elastic.loop import ElasticLoop, Fixed
from elastream.metrics.stats import FlowStats
from elastream.runtime.decisions import Applied, Decision, Levels
from elastream.runtime.handle import RunResult


class ElasticRunHandle:
    """A running flow whose parallelism an elastic loop sizes (a RunHandle)."""

    def __init__(self, inner: Any, elastic: Elastic, levels: Levels, fixed: Fixed,
                 written: Collection[str] | None = None):
        self.inner = inner
        self.written = written
        """The user's operator names when the run replicates units under other names (else None)."""
        self.loop = ElasticLoop(inner, elastic, [controller_for(inner, elastic)], levels, fixed,
                                machine=MachineProbe(elastic))
        self.loop.start()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # stats, states, finished, operator, part_stats, ...

    @property
    def elastic_timeline(self):
        """Every period's levels, throughput and decisions so far (a Timeline; ``result.timeline`` at the end).

        ``handle.timeline`` stays the backend's list of every submitted decision as applied.
        """
        return self.loop.timeline

    def stats(self) -> FlowStats:
        """The run's statistics under the user's operator names (:func:`~elastream.elastic.held.as_written`)."""
        return self._as_written(self.inner.stats())

    def _as_written(self, stats: FlowStats) -> FlowStats:
        if self.written is None:
            return stats
        levels = self.loop.levels
        return as_written(stats, levels.replicas.keys(), self.written, levels.moved)

    def submit(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Apply decisions of the caller's own (they go into the backend's timeline, not the loop's; the
        loop's levels follow what took effect)."""
        applied = self.inner.submit(decisions)
        self.loop.fold(applied)
        return applied

    def set_threads(self, n: int) -> int:
        return self.inner.set_threads(n)

    def request_shutdown(self) -> None:
        self.inner.request_shutdown()

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        self.loop.stop()
        return self._with_timeline(lambda: self.inner.shutdown(timeout))

    def wait(self, timeout: float | None = None) -> RunResult:
        return self._with_timeline(lambda: self.inner.wait(timeout))

    def _with_timeline(self, finish: Any) -> RunResult:
        """Finish the run, stop the loop however the run ended, and give the result the timeline."""
        try:
            result = finish()
        except TimeoutError:
            raise  # still running: the loop goes on
        except BaseException as error:
            self.loop.stop()
            partial = getattr(error, "partial", None)
            if isinstance(partial, RunResult):
                error.partial = dataclasses.replace(partial, timeline=self.loop.timeline,
                                                    stats=self._as_written(partial.stats))  # type: ignore[attr-defined]
            raise
        self.loop.stop()
        self.loop.record_final(result.stats)
        return dataclasses.replace(result, timeline=self.loop.timeline, stats=self._as_written(result.stats))


def controller_for(inner: Any, elastic: Elastic) -> Any:
    """The run's controller: the default one also regroups fused chains as the thread level changes
    (:mod:`elastream.elastic.fusion_rule`), from the flow the backend runs."""
    if elastic.controller != "auto" or not hasattr(inner, "flow"):
        return create_controller(elastic.controller)
    fuse = getattr(getattr(getattr(inner, "config", None), "scheduling", None), "fuse", True)
    if hasattr(inner, "part_flows"):  # a run over processes: a plan per process, of the part it runs
        return create_controller("auto", fusion=[FusionPlan.of(part, fuse) for part in inner.part_flows()])
    return create_controller("auto", fusion=FusionPlan.of(inner.flow, fuse))


class MachineProbe:
    """What the controllers know of the machine each period: cores, CPU load and the thread cap."""

    def __init__(self, elastic: Elastic):
        self.elastic = elastic
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement

    def __call__(self, levels: Levels) -> Machine:
        return Machine(cores=available_cores(), cpu_percent=psutil.cpu_percent(interval=None),
                       max_threads=self.elastic.max_threads, max_processes=self.elastic.max_processes)


def start_elastic(inner: Any, elastic: Elastic, *, threads: int, processes: int, fixed: Fixed,
                  replicas: Any = None, held: bool = False, bypassed: bool = False,
                  written: Collection[str] | None = None) -> ElasticRunHandle:
    """Wrap a just-started backend handle in an elastic run (``replicas``: the replicas taking work per
    unit; ``held``: the processes those replicas leave idle are held ready, :mod:`elastream.elastic.held`;
    ``bypassed``: units run through bypasses until they spread, :mod:`elastream.runtime.bypass`;
    ``written``: the user's operator names, when the run replicates units under other names)."""
    fused = tuple(tuple(chain) for chain in getattr(inner, "fused", ()))
    counts = dict(replicas) if isinstance(replicas, dict) else {}
    levels = Levels(threads=(threads,) * processes, replicas=counts, fused=fused, held=held, bypassed=bypassed)
    return ElasticRunHandle(inner, elastic, levels, fixed, written)
