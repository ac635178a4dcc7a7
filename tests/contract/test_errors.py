"""Contract: bad graphs fail at build time naming the operator and port; an operator
failure stops the flow cleanly with the operator's name and the original exception,
and a sink that does not depend on the failure keeps what it accepted — under every
execution mode (a worker process sends the exception's type and text, not the object).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import elastream as es
from execution_modes import ExecutionMode

pytestmark = pytest.mark.timeout(60)


def engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("elastream-") and t.is_alive()]


class Passthrough(es.Operator):
    """A coroutine operator with ``inputs`` input ports, some declared control ports."""

    def __init__(self, inputs=1, control_inputs=()):
        super().__init__(inputs=inputs, outputs=1, control_inputs=control_inputs)

    async def process(self, ctx: es.Context):
        spec = {p: 1 for p in ctx.inputs}
        while await ctx.wait_for_any(spec) is es.Status.DONE:
            for p in ctx.inputs:
                if len(p):
                    await ctx.outputs[0].push(p.pop())


def assert_rejected(flow: es.Flow, operator: str | None, port: str | None = None) -> es.FlowValidationError:
    """Both ``flow.validate()`` and ``Runner.run`` raise the same error, naming operator and port."""
    with pytest.raises(es.FlowValidationError) as by_validate:
        flow.validate()
    with pytest.raises(es.FlowValidationError) as by_run:
        es.Runner(threads=2).run(flow, timeout=10)
    for err in (by_validate.value, by_run.value):
        assert err.operator == operator
        assert err.port == port
        if operator is not None:
            assert repr(operator) in str(err)
    return by_validate.value


# -- build-time validation ----------------------------------------------------------

def test_unconnected_input_port():
    flow = es.Flow("f")
    src = flow.add(es.ops.FromIterable(range(3)), name="src")
    u = flow.add(es.ops.Union(2), name="merge")
    flow.connect(src.out(0), u.in_(0))
    u >> flow.add(es.ops.Collect(), name="sink")
    assert_rejected(flow, "merge", "in_(1)")


def test_output_port_out_of_range():
    flow = es.Flow("f")
    src = flow.add(es.ops.FromIterable(range(3)), name="src")
    with pytest.raises(es.FlowValidationError) as err:
        src.out(5)
    assert (err.value.operator, err.value.port) == ("src", "out(5)")
    assert "'src'" in str(err.value)


def test_input_port_out_of_range():
    flow = es.Flow("f")
    u = flow.add(es.ops.Union(2), name="merge")
    with pytest.raises(es.FlowValidationError) as err:
        u.in_(3)
    assert (err.value.operator, err.value.port) == ("merge", "in_(3)")
    assert "'merge'" in str(err.value)


def test_duplicate_operator_name():
    flow = es.Flow("f")
    flow.add(es.ops.FromIterable(range(3)), name="x")
    with pytest.raises(es.FlowValidationError) as err:
        flow.add(es.ops.Map(str), name="x")
    assert err.value.operator == "x"
    assert "'x'" in str(err.value)


def cyclic_flow(control_inputs=()) -> es.Flow:
    """src -> loop.in_(0); loop -> step -> loop.in_(1); step -> sink."""
    flow = es.Flow("cycle")
    src = flow.add(es.ops.FromIterable(range(3)), name="src")
    loop = flow.add(Passthrough(inputs=2, control_inputs=control_inputs), name="loop")
    step = flow.add(es.ops.Map(lambda x: x), name="step")
    flow.connect(src.out(0), loop.in_(0))
    loop >> step
    flow.connect(step.out(0), loop.in_(1))
    step >> flow.add(es.ops.Collect(), name="sink")
    return flow


def test_cycle_not_through_a_control_input():
    err = assert_rejected(cyclic_flow(), "loop", "in_(1)")
    assert "cycle" in str(err)


def test_cycle_through_a_control_input_is_accepted():
    cyclic_flow(control_inputs=(1,)).validate()


def test_flow_without_sources():
    flow = es.Flow("nosrc")
    a = flow.add(es.ops.Map(lambda x: x), name="a")
    b = flow.add(es.ops.Map(lambda x: x), name="b")
    a >> b >> a
    err = assert_rejected(flow, None)
    assert "no source" in str(err)


def test_empty_flow():
    assert_rejected(es.Flow("empty"), None)


# -- run-time failures ----------------------------------------------------------------

class Boom(Exception):
    pass


class FailingOperator(es.Operator):
    """Forwards tuples until ``should_fail(n_seen)`` holds, then raises ``error`` inside ``process``."""

    def __init__(self, error: BaseException, should_fail: Callable[[int], bool]):
        super().__init__(inputs=1, outputs=1)
        self.error = error
        self.should_fail = should_fail

    async def process(self, ctx: es.Context):
        port = ctx.inputs[0]
        seen = 0
        while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
            x = port.pop()
            seen += 1
            if self.should_fail(seen):
                raise self.error
            await ctx.outputs[0].push(x)


class SignallingCollect(es.ops.Collect):
    """A Collect that creates the file ``accepted`` once it has taken tuples (seen from every process)."""

    def __init__(self, accepted: Path):
        super().__init__()
        self.accepted = accepted
        self.signalled = False

    def on_batch(self, items: list, port: int) -> None:
        super().on_batch(items, port)
        if not self.signalled:
            self.accepted.touch()
            self.signalled = True


def exists(path: Path) -> Callable[[], bool]:
    """``path.exists()``, true for good once it has been (the failing operator asks before every tuple)."""
    seen = False

    def check() -> bool:
        nonlocal seen
        seen = seen or path.exists()
        return seen
    return check


def failing_flow(make_failing, accepted: Path) -> es.Flow:
    """Two independent pipelines: ``good`` collects a long stream, ``bad`` fails.

    The failing operator raises only once ``good`` has accepted tuples (the file ``accepted`` exists), so
    the test can check they survive the failure whatever the scheduling and whichever process runs what.
    """
    flow = es.Flow("failing")
    flow.source(es.ops.FromIterable(range(1_000_000)), name="good_src").sink(SignallingCollect(accepted),
                                                                             name="good")
    bad_src = flow.add(es.ops.FromIterable(range(1_000_000)), name="bad_src")
    failing = flow.add(make_failing(exists(accepted)), name="exploder")
    bad_src >> failing >> flow.add(es.ops.Collect(), name="bad")
    return flow


def check_cause(err: es.OperatorError, error: BaseException, mode: ExecutionMode) -> None:
    """The original exception is the cause; an operator that ran in a worker process sends its type and text."""
    if mode.in_this_process or err.__cause__ is error:
        assert err.__cause__ is error
    else:
        assert str(err.__cause__) == f"{type(error).__name__}: {error}"


def check_operator_error(excinfo, error: BaseException, accepted: Path, mode: ExecutionMode) -> None:
    err = excinfo.value
    assert err.operator == "exploder"
    assert "'exploder'" in str(err)
    check_cause(err, error, mode)
    assert engine_threads() == []
    # What the independent sink accepted is kept, in order, in the error's partial result.
    assert accepted.exists()
    good = err.partial.outputs["good"]
    assert len(good) > 0
    assert good == list(range(len(good)))


def test_exception_in_process_raises_operator_error(policy, execution_mode, tmp_path):
    error = Boom("from process")
    accepted = tmp_path / "accepted"
    flow = failing_flow(lambda good_has_items: FailingOperator(error, lambda _: good_has_items()), accepted)
    with pytest.raises(es.OperatorError) as excinfo:
        execution_mode.run(flow, policy=policy, max_queue_size=64, seed=4)
    check_operator_error(excinfo, error, accepted, execution_mode)
    assert "in process" in excinfo.value.details


def test_exception_in_map_function_raises_operator_error(policy, execution_mode, tmp_path):
    # Replicated (split -> exploder#0, exploder#1 -> merge), the error still names the user's operator.
    error = Boom("from a Map function")

    def make(good_has_items):
        def fn(x):
            if good_has_items():
                raise error
            return x
        return es.ops.Map(fn)

    accepted = tmp_path / "accepted"
    flow = failing_flow(make, accepted)
    with pytest.raises(es.OperatorError) as excinfo:
        execution_mode.run(flow, policy=policy, max_queue_size=64, seed=4)
    check_operator_error(excinfo, error, accepted, execution_mode)
    assert "Boom" in str(excinfo.value)
    assert "in fn" in excinfo.value.details


def test_failure_after_some_tuples_keeps_downstream_sink_prefix(execution_mode):
    """A sink downstream of the failure keeps the tuples it accepted before it."""
    error = Boom("eleventh tuple")
    flow = es.Flow("prefix")
    src = flow.add(es.ops.FromIterable(range(100)), name="src")
    src >> flow.add(FailingOperator(error, lambda n: n > 10), name="exploder") >> flow.add(es.ops.Collect(),
                                                                                             name="sink")
    with pytest.raises(es.OperatorError) as excinfo:
        execution_mode.run(flow, max_queue_size=4, batch_size=1)
    assert excinfo.value.operator == "exploder"
    check_cause(excinfo.value, error, execution_mode)
    kept = excinfo.value.partial.outputs.get("sink", [])
    assert kept == list(range(len(kept)))
    assert len(kept) <= 10
    assert engine_threads() == []
