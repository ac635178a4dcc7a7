"""The flows of ``elastream bench elastic``: load phases, a phased Busy operator, a recording sink, the shapes.

The load changes by a *time-based schedule at the source*: :class:`PhasedSource`
emits ``(seq, phase, emitted)`` tuples, the phase being the index of the schedule
slot the source's clock is in when it makes the tuple's batch, ``emitted`` that
instant. :class:`PhasedBusy`
then spends the cost its ``costs[phase]`` says on each tuple. The phase rides
with the tuple, so every copy of the operator (threads, replicas, worker
processes) agrees on a tuple's cost without sharing a clock, and a tuple's
cost never depends on when or where it is processed.

:class:`PhaseSink` records every tuple's ``seq`` and ``phase`` and the arrival
instant of each batch and every tuple's emission instant (``perf_counter``, which is
CLOCK_MONOTONIC on Linux and so comparable across the run's processes), which is
all the measurement needs: per-phase windows at the sink and at the source,
steady-state throughput at both ends while the source still runs, and the output check.

Example::

    shape = SHAPES["cstream-fig9"]
    flow = shape.build(gil="hold", phase_s=2.0)
    record = es.Runner().run(flow).outputs[SINK]
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from elastream.graph.flow import Flow, OperatorHandle
from elastream.operators.base import STATELESS, FunctionOperator, SourceOperator
from elastream.ops import Union
from elastream.ops.busy import hash_bytes_per_second, spin
from elastream.workloads.topologies import RoundRobinSplit

SINK = "sink"
SOURCE = "src"


class PhasedSource(SourceOperator):
    """Emit ``(seq, phase, emitted)`` as fast as back-pressure allows for ``phases × phase_s`` seconds.

    The phase is the index of the ``phase_s``-long slot the source's clock (started
    when it opens) is in when it makes a batch.
    """

    def __init__(self, phases: int, phase_s: float):
        super().__init__(outputs=1)
        if phases < 1 or not phase_s > 0:
            raise ValueError("PhasedSource needs phases >= 1 and phase_s > 0")
        self.phases = phases
        self.phase_s = phase_s
        self._next = 0
        self._t0 = 0.0

    def open(self, ctx: Any) -> None:
        self._next = 0
        self._t0 = perf_counter()

    def next_batch(self, max_items: int) -> list | None:
        now = perf_counter()
        phase = int((now - self._t0) / self.phase_s)
        if phase >= self.phases:
            return None
        start = self._next
        self._next = start + max_items
        return [(seq, phase, now) for seq in range(start, self._next)]

    def describe(self) -> str:
        return f"PhasedSource({self.phases} × {self.phase_s:g} s)"


class PhasedBusy(FunctionOperator):
    """Spend ``costs[phase]`` microseconds on each ``(seq, phase, emitted)`` tuple and forward it unchanged.

    ``gil="hold"`` spins in pure Python; ``gil="release"`` hashes a buffer sized to the
    cost with hashlib, which releases the GIL (as ``es.ops.Busy`` does).
    """

    kind = STATELESS

    def __init__(self, costs: tuple[float, ...], gil: str = "hold"):
        super().__init__(inputs=1, outputs=1)
        if gil not in ("hold", "release"):
            raise ValueError("gil must be 'hold' or 'release'")
        self.costs = tuple(costs)
        self.gil = gil
        self._blocks: tuple[bytes, ...] = ()

    def open(self, ctx: Any) -> None:
        if self.gil == "release":
            rate = hash_bytes_per_second()
            self._blocks = tuple(b"\x01" * max(2048, int(rate * c * 1e-6)) for c in self.costs)

    def on_batch(self, items: list, port: int) -> list:
        # A batch nearly always holds one phase; counting keeps the cost exact at a boundary.
        for phase, n in Counter(item[1] for item in items).items():
            self._burn(phase, n)
        return items

    def _burn(self, phase: int, n: int) -> None:
        if self.gil == "hold":
            spin(n * self.costs[phase] * 1e-6)
            return
        block = self._blocks[phase]
        for _ in range(n):
            hashlib.sha256(block).digest()

    def describe(self) -> str:
        return f"PhasedBusy({'/'.join(f'{c:g}' for c in self.costs)} µs, gil={self.gil})"


@dataclass(slots=True)
class PhaseRecord:
    """What a :class:`PhaseSink` saw: every tuple's seq, phase and emission instant in arrival order, and the
    batches' arrival instants."""

    seqs: array = field(default_factory=lambda: array("q"))
    phases: array = field(default_factory=lambda: array("b"))
    batches: list[tuple[float, int]] = field(default_factory=list)
    """(arrival perf_counter, tuples) per batch, in arrival order."""
    source_end: float = 0.0
    """The latest instant the source emitted a tuple at (what arrives after it is the backlog draining)."""
    emitted: array = field(default_factory=lambda: array("d"))
    """Per tuple (parallel to ``seqs``), the instant the source emitted it (its batch's ``perf_counter``)."""

    @property
    def count(self) -> int:
        return len(self.seqs)


class PhaseSink(FunctionOperator):
    """Record each arriving tuple's ``seq``, ``phase`` and emission instant, and each batch's arrival."""

    kind = "sink"

    def __init__(self) -> None:
        super().__init__(inputs=1, outputs=0)
        self.record = PhaseRecord()

    def open(self, ctx: Any) -> None:
        self.record = PhaseRecord()

    def on_batch(self, items: list, port: int) -> None:
        r = self.record
        r.batches.append((perf_counter(), len(items)))
        r.seqs.extend([item[0] for item in items])
        r.phases.extend([item[1] for item in items])
        emitted = [item[2] for item in items]
        r.emitted.extend(emitted)
        r.source_end = max(r.source_end, max(emitted))

    def result(self) -> PhaseRecord:
        return self.record


@dataclass(frozen=True, slots=True)
class Shape:
    """One benchmark shape: a graph of PhasedBusy operators and the cost of each in each load phase."""

    name: str
    description: str
    costs_us: tuple[tuple[float, ...], ...]
    """Per load phase, the cost per tuple (µs) of every busy operator of the phase."""
    builder: Callable[[Flow, Callable[[str], OperatorHandle], OperatorHandle], list[str]]
    ordered: bool
    """True when the flow keeps the source's order to the sink (the output check then checks order)."""

    @property
    def phases(self) -> int:
        return len(self.costs_us)

    def build(self, gil: str, phase_s: float) -> Flow:
        """A fresh flow of this shape: source → shape's busy graph → :data:`SINK`."""
        flow = Flow(f"{self.name}-{gil}")
        costs = tuple(zip(*self.costs_us))  # per busy operator, its cost in each phase
        made: list[str] = []

        def busy(name: str) -> OperatorHandle:
            made.append(name)
            return flow.add(PhasedBusy(costs[len(made) - 1], gil), name=name)

        src = flow.add(PhasedSource(self.phases, phase_s), name=SOURCE)
        sink = flow.add(PhaseSink(), name=SINK)
        self.builder(flow, busy, src, sink)
        return flow

    def busy_names(self) -> list[str]:
        """The names of the shape's busy operators (for replica configurations)."""
        flow = self.build("hold", 1.0)
        return [name for name, h in flow.operators.items() if isinstance(h.operator, PhasedBusy)]


def _chain(count: int) -> Callable[..., None]:
    def build(flow: Flow, busy: Callable[[str], Any], src: Any, sink: Any) -> None:
        prev = src
        for i in range(count):
            prev = prev >> busy(f"busy_{i}")
        prev >> sink
    return build


def _parallel(width: int, depth: int) -> Callable[..., None]:
    """source → round-robin split → ``width`` branches of ``depth`` busy operators → union → sink."""
    def build(flow: Flow, busy: Callable[[str], Any], src: Any, sink: Any) -> None:
        split = flow.add(RoundRobinSplit(width), name="split")
        merge = flow.add(Union(width), name="merge")
        src >> split
        for b in range(width):
            head = prev = busy(f"busy_{b}_0")
            for d in range(1, depth):
                prev = prev >> busy(f"busy_{b}_{d}")
            flow.connect(split.out(b), head.in_(0))
            flow.connect(prev.out(0), merge.in_(b))
        merge >> sink
    return build


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("cstream-fig9", "chain, one busy operator whose cost rises mid-run (20 → 100 → 20 µs)",
          ((20.0,), (100.0,), (20.0,)), _chain(1), ordered=True),
    Shape("cstream-fig10", "chain, two busy operators of equal cost (20 → 60 → 20 µs each)",
          ((20.0, 20.0), (60.0, 60.0), (20.0, 20.0)), _chain(2), ordered=True),
    Shape("cstream-fig11", "data-parallel: split → 6 busy operators → union (20 → 80 µs each)",
          ((20.0,) * 6, (80.0,) * 6), _parallel(6, 1), ordered=False),
    Shape("ibm-fig10", "data parallel × pipeline: 2 branches of 3 busy operators (5 → 40 → 5 µs each)",
          ((5.0,) * 6, (40.0,) * 6, (5.0,) * 6), _parallel(2, 3), ordered=False),
)}
