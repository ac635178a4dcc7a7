"""Frozen statistics snapshots (C-Stream §3.2.6, §4.2.1; Haren features).

Snapshots are built by :func:`elastream.runtime.snapshot.take_snapshot` from
live counters without stopping the flow, so values read together may be a few
tuples apart. Idle time and back-pressured time are always separate.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PortStats:
    """One input port's buffer."""

    operator: str
    port: int
    size: int
    capacity: int
    max_size: int
    writes: int
    reads: int
    dropped: int
    closed: bool
    publishers: int
    write_blocked_ratio: float
    """Fraction of the run the buffer was full (C-Stream §4.2.1)."""
    front_wait_s: float
    """How long the front tuple has waited in this buffer (0 when empty)."""


@dataclass(frozen=True, slots=True)
class OperatorStats:
    """One operator's counters."""

    name: str
    kind: str
    state: str
    activations: int
    busy_s: float
    read_blocked_s: float
    write_blocked_s: float
    tuples_in: int
    tuples_out: int
    last_scheduled: float
    read_rate: float
    """Tuples/s popped over the last monitor period."""
    write_rate: float
    """Tuples/s pushed over the last monitor period."""
    conjunctive_wait_fraction: float
    disjunctive_wait_fraction: float
    output_write_blocked_ratio: float
    """Maximum write-blocked ratio of the subscribing downstream ports (§4.2.1)."""
    inputs: tuple[PortStats, ...] = ()
    malformed: int = 0
    cpu_s: float = 0.0
    """CPU time of the worker threads while they ran this operator."""
    sent: dict[str, int] = field(default_factory=dict)
    """Tuples emitted to each downstream operator (TurboStream §V.D traffic)."""
    workers: int = 0
    """Worker threads running the operator right now (dynamic allotment, ordered-multicore §2.2)."""
    peak_workers: int = 0
    """Most worker threads that ran the operator at once."""
    max_workers: int = 1
    """The operator's bound: 1 (coroutine, stateful), its partitions (partitioned) or unbounded (stateless)."""
    key_group_load: tuple[int, ...] = ()
    """Recent tuples per key group (an ordered split's routing load, decayed as its balancing reads it)."""
    longest_hold_s: float = 0.0
    """Longest time tuples waited for a reconfiguration of the operator so far (an ordered split: a key
    group's tuples held while its state moved)."""


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """One worker thread."""

    index: int
    alive: bool
    busy_s: float
    idle_s: float
    alive_s: float
    dispatches: int
    utilisation: float
    """Fraction of its lifetime the worker spent running operators."""
    cpu_s: float = 0.0
    """CPU time the worker's thread used while running operators. Well below
    ``busy_s`` means it mostly waited for the GIL: more threads will not help."""
    process: int = 0
    """The process the thread runs in (0: this one); a multi-process run numbers ``index`` across them."""


@dataclass(frozen=True, slots=True)
class FlowStats:
    """A whole flow at one instant."""

    elapsed_s: float
    threads: int
    """Worker threads requested (the pool's target; still meaningful after the run)."""
    policy: str
    operators: dict[str, OperatorStats] = field(default_factory=dict)
    workers: tuple[WorkerStats, ...] = ()

    def total_busy_s(self) -> float:
        """Sum of operator busy time."""
        return sum(o.busy_s for o in self.operators.values())

    def mean_utilisation(self) -> float:
        """Mean utilisation over live workers, or over all once the run ended."""
        chosen = [w.utilisation for w in self.workers if w.alive] or [w.utilisation for w in self.workers]
        return sum(chosen) / len(chosen) if chosen else 0.0
