"""The overhead workload: a chain of identity ``Map`` operators, and the same functions in plain loops.

``identity_functions(k)`` makes ``k`` distinct identity functions; the engine
flow and the plain-Python loops call exactly these, so the difference is the
engine's per-tuple cost (scheduling, buffers, batching).

Example::

    fns = identity_functions(12)
    flow, sink = build_identity_chain(range(1000), fns)
    es.Runner().run(flow).outputs[sink]   # 1000
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from elastream.graph.flow import Flow
from elastream.operators.base import FunctionOperator

SINK = "count"


class CountSink(FunctionOperator):
    """Count the tuples it receives; ``result()`` is the count."""

    kind = "sink"

    def __init__(self) -> None:
        super().__init__(inputs=1, outputs=0)
        self.count = 0

    def open(self, ctx: Any) -> None:
        self.count = 0

    def on_batch(self, items: list, port: int) -> None:
        self.count += len(items)

    def result(self) -> int:
        return self.count


def identity_functions(k: int) -> list[Callable[[Any], Any]]:
    """``k`` distinct pure-Python identity functions."""

    def make(i: int) -> Callable[[Any], Any]:
        def identity(x: Any) -> Any:
            return x

        identity.__name__ = f"identity_{i}"
        return identity

    return [make(i) for i in range(k)]


def build_identity_chain(items: Iterable[Any], fns: list[Callable[[Any], Any]]) -> tuple[Flow, str]:
    """source(items) → Map(f) for each f → CountSink; returns (flow, sink name)."""
    flow = Flow("overhead")
    stream = flow.source(items, name="source")
    for i, f in enumerate(fns):
        stream = stream.map(f, name=f"map_{i}")
    stream.sink(CountSink(), name=SINK)
    return flow, SINK


def nested_loop(n: int, fns: list[Callable[[Any], Any]]) -> int:
    """``for x in range(n): for f in fns: x = f(x)``; returns the tuple count."""
    count = 0
    for x in range(n):
        for f in fns:
            x = f(x)
        count += 1
    return count


def unrolled_loop(n: int, fns: list[Callable[[Any], Any]]) -> int:
    """One comprehension calling ``fns`` as a nested expression ``fk(...f1(x))``; returns the count.

    The expression is compiled once for ``len(fns)`` functions, so no Python
    loop over the functions runs per tuple.
    """
    names = [f"f{i}" for i in range(len(fns))]
    expr = "x"
    for name in names:
        expr = f"{name}({expr})"
    code = f"def _run(n, {', '.join(names)}):\n    return len([{expr} for x in range(n)])\n"
    scope: dict[str, Any] = {}
    exec(compile(code, "<unrolled>", "exec"), scope)
    return scope["_run"](n, *fns)
