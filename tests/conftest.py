"""Shared fixtures for every elastream test suite.

* ``no_leaked_threads`` (autouse): a test fails if an ``elastream-*`` thread it
  started is still alive shortly after it ends (STYLE.md "a fixture fails the
  test if anything leaked").
* ``execution_mode``: every execution mode of :data:`execution_modes.MODES`
  (1 thread, 4 threads, 2 processes, 2 processes with replicas, Spark), one
  frozen :class:`execution_modes.ExecutionMode` each, which builds the Runner
  for a flow and skips the test, with the reason, when it cannot run the flow.
* ``stop_spark_at_the_end`` (autouse, session): stops the shared SparkSession
  a Spark-mode run started (``execution_modes.spark_session``) or a fixture did.
* ``policy`` / ``threads``: every registered scheduling policy, and 1, 2 and 4
  worker threads (the axis of tests that read a threads run's live state).
* ``matrix`` marker: under the heavy execution modes (processes, Spark) only
  :data:`execution_modes.CI_POLICY` runs by default; every other policy × heavy
  mode carries ``matrix``, deselected by ``addopts`` (``pytest -m matrix`` runs them).
* ``run_flow``: run a flow to completion with a deadline; if the deadline
  passes the flow is shut down (so nothing leaks into later tests) and the test
  fails with every operator's scheduling state, which is what a hang needs.
* ``wait_until``: poll a predicate (for observing a running flow from the test
  thread), failing with a message instead of hanging.
* ``ring_path``: runs a ring test twice, with the C hot path
  (``elastream.ipc._ringfast``) and with the Python paths alone, for rings
  created in this process.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import elastream as es
from execution_modes import CI_POLICY, MATRIX_MARK, ExecutionMode, mode_params
from flow_deadline import run_with_deadline
from ring_segments_check import SHM, created_here, ring_segments

THREAD_PREFIX = "elastream-"
JOIN_GRACE_S = 2.0


def _engine_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()}


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail the test if an ``elastream-*`` thread it started outlives it (after a 2 s join grace)."""
    before = _engine_threads()
    yield
    deadline = time.monotonic() + JOIN_GRACE_S
    for t in _engine_threads() - before:
        t.join(max(0.0, deadline - time.monotonic()))
    leaked = sorted(t.name for t in _engine_threads() - before)
    if leaked:
        pytest.fail(f"engine threads still alive {JOIN_GRACE_S} s after the test: {leaked}")


@pytest.fixture(params=mode_params())
def execution_mode(request) -> ExecutionMode:
    """Each execution mode of the contract suites (``execution_modes.MODES``)."""
    return request.param


def pytest_collection_modifyitems(config, items):
    """Every policy but :data:`CI_POLICY` under a heavy execution mode is part of the ``matrix`` run only."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        mode, policy = params.get("execution_mode"), params.get("policy")
        if isinstance(mode, ExecutionMode) and mode.heavy and policy is not None and policy != CI_POLICY:
            item.add_marker(getattr(pytest.mark, MATRIX_MARK))


@pytest.fixture(scope="session", autouse=True)
def stop_spark_at_the_end() -> Iterator[None]:
    """Stop the SparkSession at the end of the test session, whoever started it (a Spark-mode run or a fixture)."""
    yield
    if "elastream.spark.session" in sys.modules:
        sys.modules["elastream.spark.session"].stop_session()


@pytest.fixture(params=es.policies.available())
def policy(request) -> str:
    """Every registered scheduling policy, by name."""
    return request.param


@pytest.fixture(params=(1, 2, 4), ids=lambda n: f"{n}thr")
def threads(request) -> int:
    """Worker thread counts of the contract suites."""
    return request.param


@pytest.fixture
def run_flow() -> Callable[..., es.RunResult]:
    """``run_flow(flow, timeout=30, **runner_kw)``: see :func:`run_with_deadline`."""
    return run_with_deadline


def poll_until(pred: Callable[[], object], timeout: float = 10.0, what: str = "condition",
               interval: float = 0.002) -> object:
    """Return ``pred()``'s first truthy value, polling; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def wait_until() -> Callable[..., object]:
    """``wait_until(pred, timeout=10, what="...")``: see :func:`poll_until`."""
    return poll_until


@pytest.fixture(autouse=True)
def no_leaked_ring_segments():
    """Every ring a test creates is unlinked by the end of the test (3 s grace for asynchronous ends)."""
    before = ring_segments()
    yield
    deadline = time.monotonic() + 3.0
    while True:
        leaked = {name for name in ring_segments() - before if created_here(name)}
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"shared-memory segments left in {SHM}: {sorted(leaked)}"


@pytest.fixture(params=["c", "python"])
def ring_path(request, monkeypatch):
    """``"c"``: rings use the C hot path (it must be built); ``"python"``: the ring's Python paths only."""
    import elastream.ipc.ring as ring_mod

    if request.param == "c":
        assert ring_mod._ringfast is not None, "elastream.ipc._ringfast is not built (setup.py, needs a C compiler)"
    else:
        monkeypatch.setattr(ring_mod, "_ringfast", None)
    return request.param
