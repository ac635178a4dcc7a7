"""What operator code may call on its context and ports: the operator API's view of the runtime.

Operators are written against these :class:`~typing.Protocol` s, not against
the runtime's classes, so that the standard library (:mod:`elastream.ops`)
and user operators import nothing from :mod:`elastream.runtime` (layers import
in one direction: graph → operator API → runtime). The runtime's
``Context``, ``InputPort`` and ``OutputPort`` satisfy them structurally;
``tests/unit/test_context_api.py`` checks that every member named here exists there.

Threading: a context and its ports belong to one operator and are used only
by that operator's code, which runs in one worker thread at a time (not
always the same one). The awaitables suspend the operator's coroutine, never
the thread, and may only be awaited from ``process``; an operator awaits
nothing else (no ``asyncio``: ``await ctx.sleep(s)`` waits without a thread).

Example::

    async def process(self, ctx: OperatorContext) -> None:
        port, out = ctx.inputs[0], ctx.outputs[0]
        while await ctx.wait_for_all({port: 1}) is Status.DONE:
            await out.push(port.pop() * 2)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from elastream.operators.base import Status

__all__ = ["OperatorContext", "OperatorInputPort", "OperatorOutputPort"]


class OperatorInputPort(Protocol):
    """An input port: tuples in arrival order, taken from the front."""

    @property
    def index(self) -> int:
        """The port's number on its operator."""

    def pop(self) -> Any:
        """Remove and return the front tuple (IndexError when empty)."""

    def pop_many(self, n: int | None = None) -> list:
        """Remove and return up to ``n`` tuples (all available when None)."""

    def peek(self) -> Any:
        """The front tuple, left in place (IndexError when empty)."""

    def __len__(self) -> int:
        """Tuples available now."""

    @property
    def closed(self) -> bool:
        """True once every upstream operator has completed."""

    @property
    def exhausted(self) -> bool:
        """Closed and empty: no tuple will ever be popped again."""


class OperatorOutputPort(Protocol):
    """An output port: pushes suspend while a subscriber's buffer is full (back-pressure)."""

    @property
    def index(self) -> int:
        """The port's number on its operator."""

    def push(self, item: Any, clock_time: float | None = None) -> Awaitable[None]:
        """Push one tuple to every subscriber; always ``await`` it (a push not awaited is an error)."""

    def push_many(self, items: Iterable[Any], clock_time: float | None = None) -> Awaitable[None]:
        """Push many tuples, in order; always ``await`` it."""


class OperatorContext(Protocol):
    """What an operator's ``open`` and ``process`` see of the runtime.

    Function and source operators receive it in ``open(ctx)`` only; the
    record sources keep it to count records skipped under the ``skip`` error
    policy (:meth:`count_malformed`).
    """

    @property
    def name(self) -> str:
        """The operator's name in its flow."""

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the operator (``elastream.op.<name>``)."""

    @property
    def inputs(self) -> Sequence[OperatorInputPort]:
        """The input ports, by number."""

    @property
    def outputs(self) -> Sequence[OperatorOutputPort]:
        """The output ports, by number."""

    @property
    def shutdown_requested(self) -> bool:
        """True once an explicit shutdown (or a failure elsewhere) was requested."""

    @property
    def now(self) -> float:
        """The runtime clock's time in seconds (the clock deadlines and sleeps use)."""

    async def wait_for_all(self, spec: Mapping[Any, int]) -> Status:
        """Wait until every port in ``spec`` (port or index → count) holds its count; OVER when it never will."""

    async def wait_for_any(self, spec: Mapping[Any, int]) -> Status:
        """Wait until some port in ``spec`` holds its count; OVER when none ever will."""

    async def sleep(self, seconds: float) -> None:
        """Suspend this operator for ``seconds`` without holding a worker thread."""

    async def sleep_until(self, when: float) -> None:
        """Suspend until the instant ``when`` of :attr:`now`."""

    async def yield_now(self) -> None:
        """Give other operators a turn if this one's quantum is used up."""

    def request_shutdown(self) -> None:
        """Stop the whole flow of this process, as an explicit shutdown does."""

    def count_malformed(self, n: int = 1) -> None:
        """Count ``n`` records skipped under the ``skip`` error policy (``OperatorStats.malformed``)."""
