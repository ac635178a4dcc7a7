"""Misusing operators and user functions fails at once with a way out (issue 19, items 2, 4 and 6).

* a flow whose output goes nowhere (no sink) is refused at validation, naming the operator;
* a keyed/stateful step must return ``(new_state, outputs)``: another shape, or a str as the outputs,
  fails at the first record with the contract; ``initial=0`` / ``state=0`` are refused at construction;
  a fold without ``initial`` that fails on a TypeError says where the fold starts;
* a failing user function's error names the operator and the record it failed on;
* custom operators: a plain ``def process`` and a missing ``super().__init__()`` are refused by
  ``Flow.add``; a push not awaited and an ``asyncio`` await fail at once, naming the operator.

Each runtime case runs under one worker thread and, where cheap, under two (where the keyed operators
run through dynamic allotment's per-item path).
"""

from __future__ import annotations

import asyncio

import pytest

import elastream as es

RUNNERS = [pytest.param({}, id="1-thread"), pytest.param({"threads": 2}, id="2-threads")]


def failure(flow: es.Flow, **runner_kw) -> es.OperatorError:
    """The OperatorError running ``flow`` raises."""
    with pytest.raises(es.OperatorError) as info:
        es.Runner(**runner_kw).run(flow)
    return info.value


def report(error: es.OperatorError) -> str:
    """What the user reads: the error's text and the notes on the original exception."""
    notes = getattr(error.__cause__, "__notes__", [])
    return "\n".join([str(error), *notes])


def keyed(step, name: str = "step", **kw) -> es.Flow:
    flow = es.Flow("keyed")
    flow.source(range(10), name="src").key_by(lambda x: x % 2).process(step, name=name, **kw) \
        .sink(es.ops.Collect(), name="out")
    return flow


# -- item 2: a flow without a sink ---------------------------------------------------------------------------
def test_a_flow_whose_output_goes_nowhere_is_refused_at_validation():
    flow = es.Flow("nosink")
    flow.source(range(10), name="src").map(lambda x: x * 2, name="double")
    with pytest.raises(es.FlowValidationError) as info:
        flow.validate()
    message = str(info.value)
    assert info.value.operator == "double"
    assert "'double'" in message and "goes nowhere" in message
    assert ".sink(es.ops.Collect())" in message and "file sink" in message
    with pytest.raises(es.FlowValidationError, match="goes nowhere"):
        es.Runner().run(flow)


def test_every_dangling_branch_is_named_and_sinks_or_a_used_port_suffice():
    flow = es.Flow("branches")
    src = flow.source(range(4), name="src")
    src.map(str, name="as_text")
    src.filter(bool, name="nonzero")
    src.map(abs, name="kept").sink(es.ops.Collect(), name="out")
    with pytest.raises(es.FlowValidationError) as info:
        flow.validate()
    assert "'as_text'" in str(info.value) and "'nonzero'" in str(info.value) and "'kept'" not in str(info.value)

    ok = es.Flow("ok")
    ok.source(range(4), name="src").map(abs, name="m").sink(es.ops.Collect(), name="out")
    ok.validate()
    assert es.Runner().run(ok).outputs["out"] == [0, 1, 2, 3]


# -- item 4: the shape of a step ----------------------------------------------------------------------------
@pytest.mark.parametrize("runner_kw", RUNNERS)
def test_a_step_that_returns_no_outputs_pair_fails_at_the_first_record_with_the_contract(runner_kw):
    error = failure(keyed(lambda st, x: st + x, state=int), **runner_kw)
    assert error.operator == "step"
    assert isinstance(error.__cause__, TypeError)
    text = str(error)
    assert "step must return (new_state, outputs)" in text and "it returned 0 (int)" in text
    assert "on the record 0" in text


@pytest.mark.parametrize("runner_kw", RUNNERS)
def test_a_step_whose_outputs_are_a_string_is_refused_instead_of_emitting_characters(runner_kw):
    error = failure(keyed(lambda st, x: (st, "abc"), state=int), **runner_kw)
    text = str(error)
    assert isinstance(error.__cause__, TypeError)
    assert "'abc'" in text and "str" in text and "(new_state, [value])" in text
    assert error.partial is None or error.partial.outputs.get("out") in (None, [])


def test_a_step_whose_outputs_are_not_iterable_says_to_wrap_them():
    error = failure(keyed(lambda st, x: (st + 1, st), state=int))  # (state, 0) is falsy: the second record
    assert "not an iterable" in str(error) and "(new_state, [value])" in str(error)


def test_a_whole_stream_step_with_a_string_output_is_refused_too():
    flow = es.Flow("stateful")
    flow.source(["a", "b"], name="src").process(lambda n, x: (n + 1, x.upper()), state=int, name="shout") \
        .sink(es.ops.Collect(), name="out")
    error = failure(flow)
    assert error.operator == "shout" and "(new_state, [value])" in str(error)


@pytest.mark.parametrize("build", [
    pytest.param(lambda s: s.key_by(len).reduce(lambda acc, w: acc + 1, initial=0), id="reduce"),
    pytest.param(lambda s: s.key_by(len).process(lambda st, w: (st, [w]), state=0), id="keyed-process"),
    pytest.param(lambda s: s.process(lambda st, w: (st, [w]), state=0), id="stateful-process")])
def test_an_initial_value_instead_of_a_factory_is_refused_at_construction(build):
    flow = es.Flow("factory")
    with pytest.raises(TypeError) as info:
        build(flow.source(["a"], name="src"))
    message = str(info.value)
    assert "zero-argument factory" in message and "=int" in message and "lambda: 0" in message


@pytest.mark.parametrize("runner_kw", RUNNERS)
def test_a_fold_without_initial_failing_on_types_says_where_the_fold_starts(runner_kw):
    flow = es.Flow("words")
    flow.source(["to", "be", "or", "not", "to", "be"], name="src").key_by(lambda w: w) \
        .reduce(lambda acc, w: acc + 1, name="counts").sink(es.ops.Collect(), name="out")
    error = failure(flow, **runner_kw)
    assert error.operator == "counts" and isinstance(error.__cause__, TypeError)
    text = report(error)
    assert "has no initial" in text and "first tuple" in text and "initial=int" in text
    assert "failed on the record 'to'" in text


def test_a_window_fold_without_initial_failing_on_types_says_where_it_starts():
    flow = es.Flow("windows")
    flow.source([("a", 0.0), ("a", 1.0)], name="src").key_by(lambda e: e[0]) \
        .window(es.ops.Tumbling(60.0), time=lambda e: e[1]) \
        .aggregate(lambda n, e: n + 1, name="per_minute").sink(es.ops.Collect(), name="out")
    error = failure(flow)
    text = report(error)
    assert error.operator == "per_minute"
    assert "each window's fold starts from its first tuple" in text and "initial=int" in text
    assert "('a', 1.0)" in text


# -- item 4: the record a user function failed on ---------------------------------------------------------------
@pytest.mark.parametrize("runner_kw", RUNNERS)
@pytest.mark.parametrize("attach", [
    pytest.param(lambda s: s.map(lambda x: 1 / (x - 7), name="f"), id="map"),
    pytest.param(lambda s: s.filter(lambda x: 1 / (x - 7), name="f"), id="filter"),
    pytest.param(lambda s: s.flat_map(lambda x: [1 / (x - 7)], name="f"), id="flat_map"),
    pytest.param(lambda s: s.key_by(lambda x: x % 3).process(lambda st, x: (st, [1 / (x - 7)]), state=int,
                                                             name="f"), id="keyed-process"),
    pytest.param(lambda s: s.key_by(lambda x: x % 3).reduce(lambda a, x: a + 1 / (x - 7), name="f"),
                 id="reduce"),
    pytest.param(lambda s: s.process(lambda st, x: (st, [1 / (x - 7)]), state=int, name="f"),
                 id="stateful-process")])
def test_a_failing_user_function_names_the_operator_and_the_record(attach, runner_kw):
    flow = es.Flow("failing")
    attach(flow.source(range(20), name="src")).sink(es.ops.Collect(), name="out")
    error = failure(flow, **runner_kw)
    assert error.operator == "f" and isinstance(error.__cause__, ZeroDivisionError)
    assert "failed on the record 7" in report(error)


def test_the_record_in_an_error_is_shortened():
    flow = es.Flow("long")
    flow.source(["x" * 10_000], name="src").map(int, name="parse").sink(es.ops.Collect(), name="out")
    error = failure(flow)
    note = next(n for n in error.__cause__.__notes__ if "failed on the record" in n)
    assert "Map(int)" in note and "..." in note and len(note) < 200


# -- item 6: custom operators ---------------------------------------------------------------------------------
class PlainProcess(es.Operator):
    def __init__(self):
        super().__init__(inputs=1, outputs=1)

    def process(self, ctx):  # the mistake: not async
        return None


class NoSuper(es.Operator):
    def __init__(self):  # the mistake: no super().__init__(...)
        self.factor = 2

    async def process(self, ctx):
        return None


class AsyncBatch(es.FunctionOperator):
    async def on_batch(self, items, port):  # the mistake: the runtime calls on_batch, it does not await it
        return items


def test_a_plain_def_process_is_refused_when_added():
    flow = es.Flow("plain")
    with pytest.raises(es.FlowValidationError) as info:
        flow.add(PlainProcess(), name="plain")
    assert "PlainProcess" in str(info.value) and "async def process(self, ctx)" in str(info.value)
    with pytest.raises(es.FlowValidationError, match="async def process"):
        flow.source(range(3)).then(PlainProcess())


@pytest.mark.parametrize("add", [
    pytest.param(lambda flow: flow.add(NoSuper(), name="ns"), id="add"),
    pytest.param(lambda flow: flow.source(range(3)).then(NoSuper()), id="then"),
    pytest.param(lambda flow: flow.source(NoSuper()), id="source")])
def test_a_missing_super_init_is_refused_naming_the_class(add):
    with pytest.raises(es.FlowValidationError) as info:
        add(es.Flow("nosuper"))
    assert "NoSuper" in str(info.value) and "super().__init__(" in str(info.value)


def test_an_async_on_batch_is_refused_when_added():
    with pytest.raises(es.FlowValidationError, match="on_batch must be a plain function"):
        es.Flow("asyncbatch").add(AsyncBatch(), name="b")


class Forward(es.Operator):
    """Forwards its input; ``mode`` picks the mistake made on the way."""

    def __init__(self, mode: str):
        super().__init__(inputs=1, outputs=1)
        self.mode = mode

    async def process(self, ctx):
        port, out = ctx.inputs[0], ctx.outputs[0]
        while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
            item = port.pop()
            if self.mode == "no-await":
                out.push(item)
            elif self.mode == "no-await-many":
                out.push_many([item])
            elif self.mode == "asyncio-sleep":
                await asyncio.sleep(0.001)
                await out.push(item)
            elif self.mode == "asyncio-yield":
                await asyncio.sleep(0)
                await out.push(item)
            else:
                await out.push(item)
                await out.push_many([item, item])


class LastPushNotAwaited(es.Operator):
    def __init__(self):
        super().__init__(inputs=0, outputs=1)

    async def process(self, ctx):
        ctx.outputs[0].push("only")


def forward_flow(mode: str) -> es.Flow:
    flow = es.Flow("forward")
    flow.source(range(5), name="src").then(Forward(mode), name="fwd").sink(es.ops.Collect(), name="out")
    return flow


@pytest.mark.parametrize("runner_kw", RUNNERS)
@pytest.mark.parametrize("mode", ["no-await", "no-await-many"])
def test_a_push_not_awaited_fails_at_once_naming_the_operator(mode, runner_kw):
    error = failure(forward_flow(mode), **runner_kw)
    assert error.operator == "fwd" and isinstance(error.__cause__, RuntimeError)
    assert "was not awaited" in str(error) and "await ctx.outputs[0].push(x)" in str(error)


def test_a_last_push_not_awaited_fails_when_the_operator_returns():
    flow = es.Flow("last")
    flow.source(LastPushNotAwaited(), name="src").sink(es.ops.Collect(), name="out")
    error = failure(flow)
    assert error.operator == "src" and "was not awaited" in str(error)


@pytest.mark.parametrize("runner_kw", RUNNERS)
@pytest.mark.parametrize("mode", ["asyncio-sleep", "asyncio-yield"])
def test_asyncio_inside_an_operator_fails_pointing_to_ctx_sleep(mode, runner_kw):
    error = failure(forward_flow(mode), **runner_kw)
    assert error.operator == "fwd" and isinstance(error.__cause__, RuntimeError)
    assert "'fwd'" in str(error) and "await ctx.sleep(seconds)" in str(error)
    assert "asyncio event loop" in str(error)


@pytest.mark.parametrize("runner_kw", RUNNERS)
def test_awaited_pushes_still_flow_in_order(runner_kw):
    result = es.Runner(**runner_kw).run(forward_flow("correct"))
    assert result.outputs["out"] == [x for i in range(5) for x in (i, i, i)]
