"""Transforms: Map, Filter, FlatMap, Union, Barrier (C-Stream Listing 2)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from elastream.operators.base import STATELESS, UNBOUNDED, FunctionOperator, Operator, Status
from elastream.operators.spec import Declared, OperatorSpec
from elastream.operators.user_code import failed_record, note_failed_record


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class Map(FunctionOperator):
    """Apply ``fn`` to every tuple (stateless).

    Example: ``flow.add(es.ops.Map(lambda x: x + 1))``
    """

    kind = STATELESS
    max_workers = UNBOUNDED

    def __init__(self, fn: Callable[[Any], Any]):
        super().__init__(inputs=1, outputs=1)
        self.fn = fn

    def on_batch(self, items: list, port: int) -> list:
        it = iter(items)  # where it stopped tells the failing record, at no cost per tuple
        try:
            return list(map(self.fn, it))
        except Exception as exc:
            note_failed_record(exc, self.describe(), failed_record(items, it))
            raise

    def spec(self) -> OperatorSpec:
        return self.spec_with(one_to_one=True, declared=Declared("map", self.fn))

    def describe(self) -> str:
        return f"Map({_fn_name(self.fn)})"


class Filter(FunctionOperator):
    """Keep the tuples for which ``pred`` is true (stateless)."""

    kind = STATELESS
    max_workers = UNBOUNDED

    def __init__(self, pred: Callable[[Any], bool]):
        super().__init__(inputs=1, outputs=1)
        self.pred = pred

    def on_batch(self, items: list, port: int) -> list:
        it = iter(items)
        try:
            return list(filter(self.pred, it))
        except Exception as exc:
            note_failed_record(exc, self.describe(), failed_record(items, it))
            raise

    def spec(self) -> OperatorSpec:
        return self.spec_with(declared=Declared("filter", self.pred))

    def describe(self) -> str:
        return f"Filter({_fn_name(self.pred)})"


class FlatMap(FunctionOperator):
    """Replace every tuple by the items of ``fn(tuple)``, in order (stateless)."""

    kind = STATELESS
    max_workers = UNBOUNDED

    def __init__(self, fn: Callable[[Any], Iterable[Any]]):
        super().__init__(inputs=1, outputs=1)
        self.fn = fn

    def on_batch(self, items: list, port: int) -> list:
        fn = self.fn
        out: list = []
        x = None
        try:
            for x in items:
                out.extend(fn(x))
        except Exception as exc:
            note_failed_record(exc, self.describe(), x)
            raise
        return out

    def spec(self) -> OperatorSpec:
        return self.spec_with(declared=Declared("flat_map", self.fn))

    def describe(self) -> str:
        return f"FlatMap({_fn_name(self.fn)})"


class Union(FunctionOperator):
    """Merge ``n`` input streams into one (fan-in); each input's order is kept."""

    kind = STATELESS

    def __init__(self, n: int = 2):
        if n < 1:
            raise ValueError("Union needs at least one input")
        super().__init__(inputs=n, outputs=1)

    def on_batch(self, items: list, port: int) -> list:
        return items

    def spec(self) -> OperatorSpec:
        return self.spec_with(declared=Declared("union"))


class Barrier(Operator):
    """Combine one tuple from each of ``n`` inputs into a tuple (C-Stream Listing 2)."""

    def __init__(self, n: int = 2):
        if n < 1:
            raise ValueError("Barrier needs at least one input")
        super().__init__(inputs=n, outputs=1)

    async def process(self, ctx) -> None:
        spec = {port: 1 for port in ctx.inputs}
        out = ctx.outputs[0]
        while not ctx.shutdown_requested:
            if await ctx.wait_for_all(spec) is Status.OVER:
                break
            await out.push(tuple(p.pop() for p in ctx.inputs))
