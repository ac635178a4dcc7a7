"""The execution modes the contract suites run a flow under: threads, processes, replicas, Spark.

A plain module (like ``flow_deadline.py``) so that the conftest fixture
``execution_mode`` and any test file can import it. Each :class:`ExecutionMode`
is a small frozen value: an ``id`` (the pytest id), how to build the
``es.Runner`` for a flow (:meth:`ExecutionMode.runner`), and whether it can run
a flow at all (:meth:`ExecutionMode.supports` / :meth:`ExecutionMode.unsupported`;
:meth:`ExecutionMode.run` skips the test with that reason instead of passing it
silently).

Adding a mode is one line in :data:`MODES`; a mode that needs more than the
Runner keywords it names (elastic controllers, threading models) gets a field
here, read by :meth:`ExecutionMode.runner_options`.

``heavy`` modes (worker processes, Spark) cost a process start or a Spark job
per run: under a test that is also parametrised over every scheduling policy,
CI runs them for :data:`CI_POLICY` only and the other combinations carry the
``matrix`` marker (deselected by default; ``pytest -m matrix`` runs them). See
``pytest_collection_modifyitems`` in ``tests/conftest.py``.

Example::

    def test_chain(execution_mode):
        flow = ...
        result = execution_mode.run(flow, max_queue_size=8)
        assert result.outputs["sink"] == expected
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import elastream as es
from elastream.operators.spec import Driver, max_parallelism
from flow_deadline import run_with_deadline

#: The one scheduling policy the heavy modes run under in CI (the Runner's default).
CI_POLICY = "least_recently_run"

#: The marker of the combinations CI leaves out (every policy under the heavy modes).
MATRIX_MARK = "matrix"


def replicable_operators(flow: es.Flow) -> list[str]:
    """Operators of ``flow`` that may run as 2 ordered replicas (C-Stream §4.2), in flow order.

    One-input, one-output function operators of a parallel kind (``spec.is_parallel``:
    stateless or partitioned) with room for two instances; an ``on_end`` hook also needs
    ends reported per key (the replica graph pass refuses the others, saying why).
    """
    names = []
    for name, handle in flow.operators.items():
        spec = handle.operator.spec()
        if (spec.driver is Driver.BATCH and spec.inputs == 1 and spec.outputs == 1 and spec.is_parallel
                and max_parallelism(spec.kind, spec.key_groups) >= 2
                and (spec.on_end is None or spec.ends_by_key)):
            names.append(name)
    return names


#: The configuration of the test session's one SparkSession (``tests/spark/conftest.py`` builds the same).
SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}


def spark_session() -> object:
    """The test session's cached SparkSession, started with :data:`SPARK_CONF` on first use (a Spark-mode run
    starts it here, so it never gets the backend's default configuration); ``tests/conftest.py`` stops it."""
    from elastream.spark.session import get_session

    return get_session(conf=SPARK_CONF)


def spark_unsupported(flow: es.Flow) -> str | None:
    """Why the Spark backend cannot run ``flow`` (None: it can): only declared operators from a
    FromParquet source to Collect sinks. The backend's own planner decides, without starting Spark."""
    from elastream.spark.failures import SparkTranslationError
    from elastream.spark.plan import plan_flow

    try:
        plan_flow(flow)
    except SparkTranslationError as exc:
        return f"the Spark backend cannot run flow {flow.name!r}: {exc}"
    return None


@dataclass(frozen=True, slots=True)
class ExecutionMode:
    """One way to run a flow: the Runner keywords it sets, and what it can run.

    ``threads`` / ``processes`` / ``backend`` go to ``es.Runner`` as they are;
    ``replicate`` asks ``replicas={op: 2}`` for every :func:`replicable_operators`
    of the flow (none: a plain run); ``heavy`` marks a costly mode (see the module doc).
    """

    id: str
    threads: int = 1
    processes: int = 1
    backend: str = "auto"
    replicate: bool = False
    model: str = "dynamic"
    """The threading model (``Runner(model=...)``): the worker pool, a thread per operator, one fused thread."""
    heavy: bool = False
    marks: tuple[str, ...] = ()
    """pytest markers of every test run under this mode (``spark``)."""

    @property
    def in_this_process(self) -> bool:
        """True when the whole flow runs on this process's worker threads (the handle exposes live operators)."""
        return self.backend in ("auto", "threads") and self.processes == 1

    def unsupported(self, flow: es.Flow) -> str | None:
        """Why this mode cannot run ``flow``, or None."""
        if self.backend == "spark":
            return spark_unsupported(flow)
        return None

    def supports(self, flow: es.Flow) -> bool:
        """True when this mode can run ``flow``."""
        return self.unsupported(flow) is None

    def runner_options(self, flow: es.Flow) -> dict[str, Any]:
        """The ``es.Runner`` keywords of this mode for ``flow``."""
        options: dict[str, Any] = {"threads": self.threads, "processes": self.processes, "backend": self.backend}
        if self.model != "dynamic":
            options = {"model": self.model, "processes": self.processes, "backend": self.backend}
        if self.replicate:
            replicas = {name: 2 for name in replicable_operators(flow)}
            if replicas:
                options["replicas"] = replicas
        return options

    def runner(self, flow: es.Flow, **options: Any) -> es.Runner:
        """The Runner for ``flow`` under this mode; ``options`` add the test's own keywords (policy, queue sizes)."""
        return es.Runner(**{**self.runner_options(flow), **options})

    def skip_unless_supported(self, flow: es.Flow) -> None:
        """Skip the calling test, with the reason, when this mode cannot run ``flow``."""
        reason = self.unsupported(flow)
        if reason is not None:
            pytest.skip(f"{self.id}: {reason}")

    def _prepare(self, flow: es.Flow) -> None:
        """Skip the test if this mode cannot run ``flow``; start the shared Spark session for a Spark run."""
        self.skip_unless_supported(flow)
        if self.backend == "spark":
            spark_session()

    def start(self, flow: es.Flow, **options: Any) -> es.RunHandle:
        """Start ``flow`` under this mode (skipping the test if the mode cannot run it)."""
        self._prepare(flow)
        return self.runner(flow, **options).start(flow)

    def run(self, flow: es.Flow, timeout: float = 30.0, **options: Any) -> es.RunResult:
        """Run ``flow`` to its end under this mode with a deadline (a hang fails naming the stuck operators)."""
        self._prepare(flow)
        if self.backend == "spark":
            timeout = max(timeout, 300.0)  # a Spark query takes seconds to start, more on a loaded machine
        return run_with_deadline(flow, timeout, **{**self.runner_options(flow), **options})

    def __str__(self) -> str:
        return self.id


#: Every execution mode of the contract suites, in the order of their test ids.
MODES: tuple[ExecutionMode, ...] = (
    ExecutionMode("1thr", threads=1),
    ExecutionMode("4thr", threads=4),
    # Policies do not choose under these two (a thread per operator; one thread, few queues): CI runs them
    # under the default policy only, like the heavy modes.
    ExecutionMode("manual", model="manual", heavy=True),
    ExecutionMode("dedicated", model="dedicated", heavy=True),
    ExecutionMode("2proc", processes=2, heavy=True),
    ExecutionMode("2proc-replicas", processes=2, replicate=True, heavy=True),
    ExecutionMode("spark", backend="spark", heavy=True, marks=("spark",)),
)


def mode_params(modes: tuple[ExecutionMode, ...] = MODES) -> list[Any]:
    """``pytest.param`` of each mode, with its id and markers (for a fixture or a parametrize)."""
    return [pytest.param(m, id=m.id, marks=[getattr(pytest.mark, name) for name in m.marks]) for m in modes]
