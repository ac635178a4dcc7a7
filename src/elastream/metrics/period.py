"""The per-period statistics snapshot: what changed over the last period, per worker, operator and port.

Policies, elasticity controllers and Haren's scheduling task read this one
snapshot rather than walking live tasks (DESIGN.md "Decisions, applied at one
point"). It is the difference of two whole-run :class:`~elastream.metrics.stats.FlowStats`
taken one period apart, so every backend that reports FlowStats (threads, and
worker processes merged in the parent) gives the same thing.

Rates follow the DS2 model: an operator's *true processing rate* is the
tuples it handled per second of useful (busy) time, not per wall-clock
second, so waiting for input or for a full downstream port does not lower it.

Threading: immutable values; :func:`period_between` is a pure function.

Example::

    before = handle.stats(); ...; after = handle.stats()
    period = period_between(before, after)
    period.operators["parse"].true_rate       # tuples per busy second
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elastream.metrics.stats import FlowStats, OperatorStats, WorkerStats


@dataclass(frozen=True, slots=True)
class OperatorPeriod:
    """One operator over one period (deltas), plus its input queues at the period's end."""

    name: str
    kind: str
    tuples_in: int
    tuples_out: int
    busy_s: float
    cpu_s: float
    read_blocked_s: float
    write_blocked_s: float
    queue_length: int
    """Tuples waiting in its input ports at the end of the period."""
    write_blocked_ratio: float
    """Largest fraction of time one of its downstream ports was full (C-Stream §4.2.1), whole run so far."""
    sent: dict[str, int] = field(default_factory=dict)
    """Tuples it emitted to each downstream operator over the period (the graph's edges, weighted)."""
    key_group_load: tuple[int, ...] = ()
    """Recent tuples per key group at the period's end (an ordered split's routing load)."""
    new_hold_s: float = 0.0
    """A longer hold for a reconfiguration than any before it, when one ended this period (else 0)."""
    ended: bool = False
    """True once it has completed (by the period's end)."""

    @property
    def true_rate(self) -> float:
        """Tuples handled per busy second (DS2's true processing rate); 0 when it did not run."""
        return self.tuples_in / self.busy_s if self.busy_s > 0 else 0.0

    @property
    def selectivity(self) -> float:
        """Tuples out per tuple in over the period (1.0 when nothing came in)."""
        return self.tuples_out / self.tuples_in if self.tuples_in else 1.0

    @property
    def cost_per_tuple_s(self) -> float:
        """Busy seconds per input tuple (Haren's cost feature); 0 when nothing came in."""
        return self.busy_s / self.tuples_in if self.tuples_in else 0.0


@dataclass(frozen=True, slots=True)
class WorkerPeriod:
    """One worker thread over one period."""

    index: int
    busy_s: float
    cpu_s: float
    utilisation: float
    """Busy fraction of the period."""
    alive_s: float | None = None
    """Seconds of the period the thread was running (None: all of it). The first period of a run
    starts before its threads do: about 30 ms of a fifth of a second."""
    process: int = 0
    """The process the thread runs in (0: the parent)."""

    @property
    def cpu_share(self) -> float:
        """CPU seconds per busy second: well below 1 means the thread mostly waited for the GIL."""
        return self.cpu_s / self.busy_s if self.busy_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PeriodStats:
    """Everything that changed over one period of a run."""

    start_s: float
    """Run time (s) at the period's start."""
    period_s: float
    operators: dict[str, OperatorPeriod] = field(default_factory=dict)
    workers: tuple[WorkerPeriod, ...] = ()

    def busy_s(self) -> float:
        """Busy seconds of every worker over the period."""
        return sum(w.busy_s for w in self.workers)

    def alive_s(self) -> float | None:
        """Seconds the workers ran over the period, summed (None when a worker's is not known)."""
        alive = [w.alive_s for w in self.workers]
        return None if not alive or None in alive else sum(alive)  # type: ignore[arg-type]

    def capacity_ran(self, capacity_s: float) -> float:
        """``capacity_s`` of worker time, or the seconds the workers ran when fewer (and known): a run's first
        period starts before its threads do, and a worker process's threads start later still."""
        alive = self.alive_s()
        return capacity_s if alive is None else min(capacity_s, alive)

    def cpu_s(self) -> float:
        """CPU seconds of every worker over the period."""
        return sum(w.cpu_s for w in self.workers)


def _operator_delta(before: OperatorStats | None, after: OperatorStats) -> OperatorPeriod:
    def d(attr: str) -> float:
        return getattr(after, attr) - (getattr(before, attr) if before is not None else 0)

    return OperatorPeriod(
        name=after.name, kind=after.kind, tuples_in=int(d("tuples_in")), tuples_out=int(d("tuples_out")),
        busy_s=max(0.0, d("busy_s")), cpu_s=max(0.0, d("cpu_s")), read_blocked_s=d("read_blocked_s"),
        write_blocked_s=d("write_blocked_s"), queue_length=sum(p.size for p in after.inputs),
        write_blocked_ratio=after.output_write_blocked_ratio,
        sent={dst: n - (before.sent.get(dst, 0) if before is not None else 0) for dst, n in after.sent.items()},
        key_group_load=after.key_group_load,
        new_hold_s=after.longest_hold_s if after.longest_hold_s > (before.longest_hold_s if before else 0.0) else 0.0,
        ended=after.state == "completed")


def _worker_delta(before: WorkerStats | None, after: WorkerStats, period_s: float) -> WorkerPeriod:
    # Snapshots count activations in progress; one taken as a worker ends one may miss it for a moment.
    busy = max(0.0, after.busy_s - (before.busy_s if before is not None else 0.0))
    cpu = max(0.0, after.cpu_s - (before.cpu_s if before is not None else 0.0))
    alive = max(0.0, after.alive_s - (before.alive_s if before is not None else 0.0))
    return WorkerPeriod(index=after.index, busy_s=busy, cpu_s=cpu,
                        utilisation=min(1.0, busy / period_s) if period_s > 0 else 0.0, alive_s=alive,
                        process=after.process)


def period_between(before: FlowStats | None, after: FlowStats) -> PeriodStats:
    """The period from ``before`` to ``after`` (two snapshots of one run); from the start when ``before`` is None."""
    start = before.elapsed_s if before is not None else 0.0
    period = max(0.0, after.elapsed_s - start)
    old_ops = before.operators if before is not None else {}
    old_workers = dict(zip(_worker_keys(before.workers), before.workers)) if before is not None else {}
    return PeriodStats(
        start_s=start, period_s=period,
        operators={name: _operator_delta(old_ops.get(name), op) for name, op in after.operators.items()},
        workers=tuple(_worker_delta(old_workers.get(key), w, period)
                      for key, w in zip(_worker_keys(after.workers), after.workers)))


def _worker_keys(workers: tuple[WorkerStats, ...]) -> list[tuple[int, int]]:
    """Each worker's (process, place in its process's list): what names one thread in every snapshot.

    A multi-process run numbers its workers across the processes, so a thread added in process 0
    moves every later process's numbers; a process only appends to its list (a retired thread
    stays listed), so the place in it does not move.
    """
    seen: dict[int, int] = {}
    keys = []
    for w in workers:
        place = seen.get(w.process, 0)
        seen[w.process] = place + 1
        keys.append((w.process, place))
    return keys
