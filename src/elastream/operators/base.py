"""Operator API: the classes users subclass.

Two ways to write an operator (DESIGN.md "Layers", C-Stream §2.3):

* a *coroutine operator* subclasses :class:`Operator` and implements
  ``async def process(self, ctx)`` — its own driver loop that waits for data
  with ``ctx.wait_for_all`` / ``ctx.wait_for_any`` and pushes with
  ``await port.push(t)``;
* a *function operator* subclasses :class:`FunctionOperator` (or
  :class:`SourceOperator`) and handles whole batches; the runtime calls it with
  up to a budget of tuples per activation (Haren's ``run(b)``).

This module imports nothing from the runtime: an operator is plain data until a
runner compiles the flow that holds it.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from elastream.operators.spec import UNBOUNDED, Driver, Kind, OperatorSpec, max_parallelism

if TYPE_CHECKING:  # pragma: no cover
    from elastream.runtime.context import Context

__all__ = ["PARTITIONED", "STATEFUL", "STATELESS", "UNBOUNDED", "Driver", "FunctionOperator", "Kind", "Operator",
           "OperatorSpec", "SourceOperator", "Status", "max_parallelism"]

#: Operator kinds of ordered-multicore §1.1 (the :class:`Kind` members, under their old names).
STATELESS = Kind.STATELESS
PARTITIONED = Kind.PARTITIONED
STATEFUL = Kind.STATEFUL


class Status(enum.Enum):
    """Result of a data-availability call (C-Stream Algorithms 1–2)."""

    DONE = "done"
    """The wait specification is satisfied."""
    OVER = "over"
    """The wait can never be satisfied (ports closed or shutdown requested)."""


class Operator:
    """Base class of every operator.

    ``inputs`` / ``outputs`` are the port counts. ``control_inputs`` lists
    input ports declared ``control=True`` (C-Stream §3.2.2): feedback loops in
    a flow must pass through one of them.

    Example::

        class Double(es.Operator):
            def __init__(self):
                super().__init__(inputs=1, outputs=1)

            async def process(self, ctx):
                port, out = ctx.inputs[0], ctx.outputs[0]
                while await ctx.wait_for_all({port: 1}) is es.Status.DONE:
                    await out.push(port.pop() * 2)

    ``Flow.add`` refuses a subclass whose ``__init__`` does not call
    ``super().__init__`` or whose ``process`` is a plain ``def``; at run time a
    push that is not awaited, or an ``asyncio`` await (use ``await ctx.sleep(s)``),
    stops the flow with an error naming the operator.
    """

    #: Most workers that may run this operator at once (ordered-multicore §6).
    max_workers: int = 1
    #: What the operator is (:class:`~elastream.operators.spec.Kind`).
    kind: Kind = Kind.COROUTINE
    #: Which API the engine drives it through (set by the base classes).
    driver: Driver = Driver.COROUTINE
    #: Tuples its input port must hold at least, and its output's subscribers, whatever ``max_queue_size``.
    input_capacity: int = 0
    output_capacity: int = 0
    #: Declared CPU cost per tuple (µs) and output/input ratio, for offline placement (None: unknown).
    cost_us: float | None = None
    selectivity: float | None = None
    #: Hands work to another process (a ring's sending end): run ahead of the policy's pick.
    urgent: bool = False

    def __init__(self, inputs: int = 0, outputs: int = 0, *, control_inputs: Iterable[int] = ()):
        if inputs < 0 or outputs < 0:
            raise ValueError("port counts must be >= 0")
        self.n_inputs = int(inputs)
        self.n_outputs = int(outputs)
        self.control_inputs = frozenset(int(i) for i in control_inputs)
        bad = [i for i in self.control_inputs if not 0 <= i < self.n_inputs]
        if bad:
            raise ValueError(f"control input ports {bad} out of range for {self.n_inputs} inputs")

    async def process(self, ctx: Context) -> None:
        """The operator's driver loop; returns when the operator is done."""
        raise NotImplementedError(f"{type(self).__name__} must implement async def process(self, ctx)")

    def open(self, ctx: Context) -> None:
        """Called once in a worker before the first activation."""

    def close(self) -> None:
        """Called once when the operator completes, fails or is shut down.

        Sinks flush here, so nothing they accepted is lost.
        """

    def result(self) -> Any:
        """What ``RunResult.outputs[name]`` holds for this operator (None: nothing)."""
        return None

    def key_group_load(self) -> tuple[int, ...]:
        """Recent tuples per key group this instance routed or handled (empty: it keeps no such count).

        Read once per statistics snapshot (the per-period snapshot's per-key-group load).
        """
        return ()

    def required_outputs(self) -> frozenset[int]:
        """Output ports that must be connected (e.g. a dead-letter port)."""
        return frozenset()

    def describe(self) -> str:
        """Short human-readable description used in tables and errors."""
        return type(self).__name__

    def spec(self) -> OperatorSpec:
        """What this operator is, frozen: what backends and graph passes match on (never the class).

        Subclasses with a key, an end hook or a declarative transform return
        ``self.spec_with(field=value, ...)``.
        """
        return self.spec_with()

    def spec_with(self, **fields: Any) -> OperatorSpec:
        """This operator's spec from its declared attributes, with ``fields`` on top (one construction)."""
        return OperatorSpec(kind=Kind(self.kind), inputs=self.n_inputs, outputs=self.n_outputs, driver=self.driver,
                            max_workers=max(1, int(self.max_workers or 1)),
                            input_capacity=int(self.input_capacity or 0),
                            output_capacity=int(self.output_capacity or 0),
                            cost_us=self.cost_us, selectivity=self.selectivity, urgent=bool(self.urgent), **fields)

    def instantiate(self) -> Operator:
        """The instance a run works on: a shallow copy, whose run state ``open`` creates afresh.

        The flow's own object then holds no run state (results come from the instance), and
        replicas get one instance each. Override where a shallow copy would share run state.
        """
        if not hasattr(self, "__dict__"):
            return copy.copy(self)
        instance = object.__new__(type(self))  # copy.copy's work without its protocol look-ups
        instance.__dict__.update(self.__dict__)
        return instance


class FunctionOperator(Operator):
    """An operator defined by a batch function instead of a driver loop.

    The runtime takes up to a budget of tuples from one input port and calls
    :meth:`on_batch`; the returned list goes to output port 0, in order. When
    every input port is closed and drained :meth:`on_inputs_closed` may emit a
    final batch. Inputs are read disjunctively (any port with data), so
    per-port order is kept.
    """

    kind = STATELESS
    driver = Driver.BATCH

    def __init__(self, inputs: int = 1, outputs: int = 1, **kw: Any):
        if outputs > 1:
            raise ValueError("function operators have at most one output port")
        super().__init__(inputs=inputs, outputs=outputs, **kw)

    def on_batch(self, items: list, port: int) -> list | None:
        """Process a batch taken from input ``port``; return the outputs (or None)."""
        raise NotImplementedError

    def on_inputs_closed(self) -> list | None:
        """Called once after every input closed and drained; may return final outputs."""
        return None

    def on_items(self, items: list, port: int) -> list:
        """The outputs of each of ``items`` separately, in order: one list (or None) per item.

        Used under dynamic allotment, where a partitioned operator's tuples of
        one batch run on several workers and each tuple's outputs go back to
        its place in the batch. The default calls :meth:`on_batch` per item;
        keyed operators override it with one loop.
        """
        on_batch = self.on_batch
        return [on_batch([x], port) for x in items]

    def first_seen_keys(self) -> list:
        """The keys this instance holds state for, in the order it first saw them (default: none).

        A unit run through a bypass (:mod:`elastream.runtime.bypass`) saw the stream's first keys
        before its split did; the split learns them from here, so end outputs keep that order.
        """
        return []

    def order_keys(self, keys: Any) -> None:
        """Put per-key state in the order of ``keys`` (first-seen order of a sequential run).

        Under dynamic allotment a key's state may be created out of input
        order; operators whose end-of-stream output follows their keys' order
        override this. Default: nothing to do.
        """


class SourceOperator(Operator):
    """A source defined by a batch pull function.

    :meth:`next_batch` returns a list of up to ``max_items`` tuples, or None
    when the source is exhausted.
    """

    kind = Kind.SOURCE
    driver = Driver.PULL

    def __init__(self, outputs: int = 1):
        super().__init__(inputs=0, outputs=outputs)

    def next_batch(self, max_items: int) -> list | None:
        """Return the next tuples (at most ``max_items``) or None when exhausted."""
        raise NotImplementedError

    def take_side_outputs(self) -> list[tuple[int, list]]:
        """Tuples for output ports other than 0 produced by the last batch.

        Used by file sources to route dead letters; default: none.
        """
        return []
