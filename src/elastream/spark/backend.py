"""The Spark backend of ``es.Runner(backend="spark")``: a flow as one Structured Streaming query, behind a RunHandle.

:func:`start_spark` reads the flow for Spark at once (:func:`~elastream.spark.plan.plan_flow`:
a local-only operator raises :class:`~elastream.spark.failures.SparkTranslationError`
naming it, before Spark runs), then runs
:func:`~elastream.spark.driver.run_flow_on_spark` on a background thread of the
driver. :class:`SparkRunHandle` implements the
:class:`~elastream.runtime.handle.RunHandle` protocol and returns the same
:class:`~elastream.runtime.handle.RunResult` as every backend: Collect outputs by
sink name, a FlowStats with what Spark's run tells (source rows, sink tuples,
micro-batches), the elapsed time. Spark schedules its own tasks, so thread
counts and reconfiguration decisions do not apply: ``set_threads`` returns the
current count and ``submit`` answers every decision as not applied.

Example::

    result = es.Runner(backend="spark").run(flow)     # flow: FromParquet → declared operators → Collect
    result.outputs["out"]                              # == es.Runner().run(flow).outputs["out"]

Threading: the handle's methods are called from the user's thread (``stats``,
``states`` and ``finished`` from any thread); the run's driver code runs on the
handle's own thread, which ``wait`` joins.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from time import perf_counter

from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.runtime.config import RunConfig
from elastream.runtime.decisions import Applied, Decision
from elastream.runtime.handle import RunResult
from elastream.spark.driver import SparkRunResult, run_flow_on_spark
from elastream.spark.plan import FlowPlan, plan_flow

#: The policy a Spark run's statistics name: Spark's own task scheduler, not an elastream policy.
POLICY = "spark"


class SparkRunHandle:
    """A flow running as one Spark Structured Streaming query (a :class:`~elastream.runtime.handle.RunHandle`)."""

    def __init__(self, flow: Flow, config: RunConfig):
        self.flow = flow
        self.config = config
        self.plan: FlowPlan = plan_flow(flow)  # refuses local-only operators before Spark runs
        self.timeline: list[Applied] = []
        """Every decision submitted to this run, as answered (in order)."""
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._explicit_shutdown = False
        self._outcome: SparkRunResult | None = None
        self._error: BaseException | None = None
        self._started = perf_counter()
        self._ended: float | None = None
        self._thread = threading.Thread(target=self._drive, name=f"elastream-spark-{flow.name}", daemon=True)

    def _start(self) -> None:
        self._started = perf_counter()
        self._thread.start()

    def _drive(self) -> None:
        """The background thread: the whole Spark run; its result or error is kept for ``wait``."""
        try:
            self._outcome = run_flow_on_spark(self.flow, stop=self._stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by wait
            self._error = exc
        finally:
            self._ended = perf_counter()
            self._finished.set()

    # -- control -------------------------------------------------------------------
    def set_threads(self, n: int) -> int:
        """Not applicable: Spark runs its own tasks. Returns the current count (the one the run was given)."""
        return self.config.threads

    def submit(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Answer every decision as not applied (Spark schedules its own tasks), and record them."""
        at = perf_counter() - self._started
        applied = [Applied(d, at, False, f"{type(d).__name__} is not applied by the Spark backend "
                                         "(Spark schedules its own tasks)") for d in decisions]
        self.timeline.extend(applied)
        return applied

    def request_shutdown(self) -> None:
        """Ask the run to stop at its next step (what reached the sinks is kept), without waiting."""
        self._explicit_shutdown = True
        self._stop.set()

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        """Stop the run early and wait for it (the query stops at its next step)."""
        self.request_shutdown()
        return self.wait(timeout)

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run ends; raise OperatorError naming the operator that failed in a Spark worker."""
        try:
            if not self._finished.wait(timeout):
                raise TimeoutError(f"flow {self.flow.name!r} still running on Spark after {timeout} s")
        except KeyboardInterrupt:
            self.request_shutdown()
            raise
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._outcome is not None and self._ended is not None
        return RunResult(outputs=dict(self._outcome.outputs), stats=self.stats(),
                         elapsed_s=self._ended - self._started, shutdown=self._explicit_shutdown)

    # -- observation ------------------------------------------------------------------
    @property
    def finished(self) -> threading.Event:
        """Set once the run has ended (completed, failed or shut down)."""
        return self._finished

    def stats(self) -> FlowStats:
        """What is known: elapsed time, and once the run ended the source rows, sink tuples and micro-batches."""
        now = self._ended if self._ended is not None else perf_counter()
        outcome = self._outcome
        state = self._state()
        operators = {}
        for i, route in enumerate(self.plan.routes):
            spec = self.flow[route.name].operator.spec()
            tuples_in = tuples_out = activations = 0
            if outcome is not None and i == self.plan.source:
                tuples_out = outcome.rows_in
            if outcome is not None and i in self.plan.sinks:
                tuples_in, activations = len(outcome.outputs[route.name]), outcome.batches
            operators[route.name] = OperatorStats(
                name=route.name, kind=spec.kind.value, state=state, activations=activations, busy_s=0.0,
                read_blocked_s=0.0, write_blocked_s=0.0, tuples_in=tuples_in, tuples_out=tuples_out,
                last_scheduled=0.0, read_rate=0.0, write_rate=0.0, conjunctive_wait_fraction=0.0,
                disjunctive_wait_fraction=0.0, output_write_blocked_ratio=0.0, max_workers=spec.max_workers)
        return FlowStats(elapsed_s=now - self._started, threads=self.config.threads, policy=POLICY,
                         operators=operators)

    def states(self) -> dict[str, str]:
        """Operator name → state: Spark runs the whole flow as one query, so every operator shares it."""
        state = self._state()
        return {route.name: state for route in self.plan.routes}

    def _state(self) -> str:
        if not self._thread.is_alive() and not self._finished.is_set():
            return "ready"
        return "completed" if self._finished.is_set() else "running"


def start_spark(flow: Flow, config: RunConfig) -> SparkRunHandle:
    """Read ``flow`` for Spark (refusing local-only operators now) and start it on a driver thread; its handle.

    Example::

        handle = start_spark(flow, RunConfig(backend="spark"))
        handle.wait().outputs["out"]
    """
    handle = SparkRunHandle(flow, config)
    handle._start()
    return handle
