"""IBM Streams' 1,000-operator graphs (workloads.large) start, run to completion with every tuple
delivered exactly once, and shut down without leaving a thread behind (the autouse
``no_leaked_threads`` fixture), under every registered scheduling policy and threading model.

Fusion is off, so the scheduler handles each of the 1,000 operators as a task of its own.
CI runs a representative subset (the pipeline under qst, ct and the default policy; the wide and
mixed graphs under the default policy); every other shape × policy × model carries the ``matrix``
marker (``pytest -m matrix``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import elastream as es
from elastream.workloads import large
from flow_deadline import run_with_deadline

pytestmark = pytest.mark.timeout(120)

#: Tuples per run: enough on the pipeline for a statistics period to see traffic along most of the
#: chain (what made the recursive cumulative selectivity of qst and ct overflow the stack).
N_TUPLES = {"pipeline-1000": 2000, "wide-1000": 600, "mixed-10x100": 600}
DEFAULT_POLICY = "least_recently_run"
SHAPES: dict[str, Callable[..., tuple[es.Flow, str]]] = {
    "pipeline-1000": lambda **kw: large.pipeline(1000, **kw),
    "wide-1000": lambda **kw: large.data_parallel(1000, **kw),
    "mixed-10x100": lambda **kw: large.mixed(10, 100, **kw),
}
#: Busy operators + source + sink (+ split and merge when wider than 1).
TASKS = {"pipeline-1000": 1002, "wide-1000": 1004, "mixed-10x100": 1004}
DEPTH = {"pipeline-1000": 1000, "wide-1000": 1, "mixed-10x100": 100}
CI_CASES = {("pipeline-1000", "qst"), ("pipeline-1000", "ct"), ("pipeline-1000", DEFAULT_POLICY),
            ("wide-1000", DEFAULT_POLICY), ("mixed-10x100", DEFAULT_POLICY)}


def shape_policy_cases() -> list:
    cases = []
    for shape in SHAPES:
        for policy in es.policies.available():
            marks = () if (shape, policy) in CI_CASES else (pytest.mark.matrix,)
            cases.append(pytest.param(shape, policy, marks=marks, id=f"{shape}-{policy}"))
    return cases


def assert_every_tuple_once(result: es.RunResult, sink: str, n: int) -> None:
    """The sink got seq 0 .. n-1, each once (count and sum, then the set itself)."""
    seqs = [seq for seq, _ in result.outputs[sink]]
    assert len(seqs) == n
    assert sum(seqs) == n * (n - 1) // 2
    assert set(seqs) == set(range(n))


def no_engine_worker_alive() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("elastream-worker") and t.is_alive()]


@pytest.mark.parametrize(("shape", "policy"), shape_policy_cases())
def test_large_flow_runs_under_the_policy(shape, policy):
    n = N_TUPLES[shape]
    flow, sink = SHAPES[shape](n_tuples=n, flops=1, sink=es.ops.Collect())
    result = run_with_deadline(flow, timeout=90, threads=2, policy=policy, seed=0, elastic=False,
                               scheduling=es.SchedulingConfig(fuse=False, stats_period_ms=50))
    assert_every_tuple_once(result, sink, n)
    assert len(result.stats.operators) == TASKS[shape]
    busy_in = sum(op.tuples_in for name, op in result.stats.operators.items() if name.startswith("busy_"))
    assert busy_in == n * DEPTH[shape]  # each tuple went through one chain, every stage of it
    assert no_engine_worker_alive()


@pytest.mark.matrix
@pytest.mark.parametrize("model", ["dedicated", "manual"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_large_flow_runs_under_the_model(shape, model):
    flow, sink = SHAPES[shape](n_tuples=N_TUPLES[shape], flops=1, sink=es.ops.Collect())
    result = run_with_deadline(flow, timeout=90, model=model, elastic=False,
                               scheduling=es.SchedulingConfig(fuse=False))
    assert_every_tuple_once(result, sink, N_TUPLES[shape])
    assert no_engine_worker_alive()


def test_the_elastic_default_runner_runs_the_pipeline():
    """Runner() as a user writes it (elastic threads, fusion on) on the 1,000-operator pipeline."""
    flow, sink = large.pipeline(1000, n_tuples=600, flops=100, sink=es.ops.Collect())
    result = run_with_deadline(flow, timeout=90)
    assert_every_tuple_once(result, sink, 600)


def test_a_shut_down_large_flow_ends_cleanly():
    """An endless 1,000-operator pipeline stops on request: every worker ends, nothing hangs."""
    flow, sink = large.pipeline(1000, n_tuples=None, seconds=3600, flops=1, sink=es.ops.Collect())
    handle = es.Runner(threads=2, policy="qst", elastic=False,
                       scheduling=es.SchedulingConfig(fuse=False)).start(flow)
    wait_for_output(handle, sink)
    result = handle.shutdown(timeout=20)
    assert result.shutdown
    seqs = [seq for seq, _ in result.outputs[sink]]
    assert seqs == sorted(set(seqs))  # a pipeline keeps order, and nothing came twice
    assert no_engine_worker_alive()


def wait_for_output(handle, sink: str, timeout: float = 30.0) -> None:
    """Until the sink has taken a tuple (read from the statistics, safe while running)."""
    finished = threading.Event()
    deadline = threading.Timer(timeout, finished.set)
    deadline.start()
    try:
        while not finished.is_set() and not handle.stats().operators[sink].tuples_in:
            finished.wait(0.02)
    finally:
        deadline.cancel()
    assert handle.stats().operators[sink].tuples_in, f"no tuple reached {sink!r} within {timeout} s"


def test_the_builders_name_their_operators_and_check_their_arguments():
    flow, sink = large.mixed(3, 4, n_tuples=5)
    names = set(flow.operators)
    assert {"src", "split", "merge", sink} <= names
    assert {f"busy_{b}_{s}" for b in range(3) for s in range(4)} <= names
    assert len(names) == 3 * 4 + 4
    assert "split" not in large.pipeline(5, n_tuples=5)[0].operators
    with pytest.raises(ValueError):
        large.mixed(0, 3, n_tuples=5)
    with pytest.raises(ValueError):
        large.pipeline(3, n_tuples=None)
    assert large.flops_cost_us(0) == 0.0
    assert large.flops_cost_us(1000) == pytest.approx(1000 * large.flops_cost_us(1))
