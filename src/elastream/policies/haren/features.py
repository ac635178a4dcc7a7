"""Haren's features (§3.1, Table 1): what ``f`` and ``g`` read, and how each one changes.

A :class:`Feature` says how to compute its value for one operator and how it changes:

* **independent** (Definition 3.1): changes only when its own operator runs (cost, selectivity);
  the worker that ran the operator recomputes it, in parallel with the others;
* **dependent** (Definition 3.3): also changes when other operators run (the head clock time changes
  when an upstream peer adds tuples); ``spreads_to`` names whose value running an operator may
  change (``"downstream"``: its subscribers), which fills the dependency bitmap D once;
* **execution-intrinsic** (Definition 3.4): can be refreshed only by running the operator, so an
  operator whose policy reads such a feature is run anyway after ``d`` seconds without a run;
* **constant**: read once (the query's priority class).

The values live in a :class:`FeatureTable` (Haren's matrix F: one column per feature, one row per
operator), computed over the same quantities as the per-period statistics snapshot
(:class:`~elastream.metrics.period.OperatorPeriod`: busy seconds per input tuple, outputs per input),
but from the counters of only the operators that ran, at each scheduling task, rather than from a
whole-flow snapshot: Haren's selective update.

Users add features with :func:`register_feature`; a policy lists the features it reads and only
those are computed.

Example::

    register_feature(Feature("queued", lambda op, old, now: float(op.task.queued), dependent=True,
                             execution_intrinsic=False, spreads_to="downstream"))

Threading: the table's columns are plain lists; a worker writes the rows of the operators it ran
(independent features), the one worker running the sequential part writes dependent features, and
every worker reads them after the barrier.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.policies.haren.operators import OperatorView

#: (operator, previous value, now) -> new value.
Compute = Callable[[OperatorView, float, float], float]
#: The head clock time of an operator with nothing queued: after any real time (FCFS runs it last).
NO_TUPLE = float("inf")
SPREADS = ("none", "downstream", "upstream", "both")


@dataclass(frozen=True, slots=True)
class Feature:
    """One feature: its name, how to compute it, and how it changes (§3.1)."""

    name: str
    compute: Compute
    dependent: bool = False
    execution_intrinsic: bool = True
    spreads_to: str = "none"
    constant: bool = False
    initial: float = 0.0

    def __post_init__(self) -> None:
        if self.spreads_to not in SPREADS:
            raise ValueError(f"feature {self.name!r}: spreads_to must be one of {', '.join(SPREADS)}")
        if self.dependent and self.spreads_to == "none":
            raise ValueError(f"feature {self.name!r} is dependent: say whose runs change it (spreads_to)")


def _cost(op: OperatorView, old: float, now: float) -> float:
    """Busy seconds per input tuple over the operator's last period (per output tuple for a source)."""
    n = op.period_out if op.is_source else op.period_in
    return op.period_busy_s / n if n else old


def _selectivity(op: OperatorView, old: float, now: float) -> float:
    """Outputs per input tuple over the last period; a sink's is 1 (its outputs are the query's egress)."""
    if op.is_source or op.is_sink:
        return 1.0
    return op.period_out / op.period_in if op.period_in else old


def _head_clock_time(op: OperatorView, old: float, now: float) -> float:
    """The earliest clock time at the head of the operator's inputs (§3.1).

    A tuple's clock time is the time its source emitted it (the origin its chunk carries, §2). A
    source has no input: its head clock time is when it last ran (what it emits next has waited since
    then), which only running it refreshes (execution-intrinsic for sources, Table 1).
    """
    if op.is_source:
        return op.task.last_scheduled
    front = op.task.front_times()
    return front[1] if front is not None else NO_TUPLE


def _priority_class(op: OperatorView, old: float, now: float) -> float:
    return float(op.class_rank)


COST = Feature("cost", _cost)
SELECTIVITY = Feature("selectivity", _selectivity, initial=1.0)
HEAD_CLOCK_TIME = Feature("head_clock_time", _head_clock_time, dependent=True, spreads_to="downstream",
                          initial=NO_TUPLE)
PRIORITY_CLASS = Feature("priority_class", _priority_class, execution_intrinsic=False, constant=True)

_FEATURES: dict[str, Feature] = {f.name: f for f in (COST, SELECTIVITY, HEAD_CLOCK_TIME, PRIORITY_CLASS)}


def register_feature(feature: Feature) -> Feature:
    """Make ``feature`` available to policies by its name; returns it."""
    known = _FEATURES.get(feature.name)
    if known is not None and known != feature:
        raise ValueError(f"feature {feature.name!r} is already registered")
    _FEATURES[feature.name] = feature
    return feature


def feature(name: str) -> Feature:
    """The registered feature ``name``."""
    try:
        return _FEATURES[name]
    except KeyError:
        raise ValueError(f"unknown Haren feature {name!r}; known: {', '.join(sorted(_FEATURES))}") from None


class FeatureTable:
    """Haren's matrix F: ``table["cost"][op.index]``, one column per feature a policy reads.

    ``views`` lists the operators (O) by index; ``memo`` is cleared at every scheduling task: a
    recursive priority (HR's downstream rate, Chain's envelope) keeps each operator's value there so
    that ``g`` computes it once per period.
    """

    def __init__(self, features: Sequence[Feature], views: Sequence[OperatorView]):
        self.features = tuple(features)
        #: Every scheduled operator (O), by index: what a priority over the graph walks.
        self.views = list(views)
        n_operators = len(self.views)
        self.columns: dict[str, list[float]] = {f.name: [f.initial] * n_operators for f in features}
        self.independent = tuple(f for f in features if not f.dependent and not f.constant)
        self.dependent = tuple(f for f in features if f.dependent)
        self.constant = tuple(f for f in features if f.constant)
        self.memo: dict[Any, Any] = {}
        #: What depends on the graph only (an order of the operators): kept for the table's life.
        self.graph_cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> list[float]:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    @property
    def execution_intrinsic(self) -> bool:
        """True when some feature can be refreshed only by running its operator (§5: the delay ``d``)."""
        return any(f.execution_intrinsic for f in self.features)

    def update(self, op: OperatorView, features: Iterable[Feature], now: float) -> None:
        """Recompute ``features`` of ``op``."""
        i = op.index
        for f in features:
            column = self.columns[f.name]
            column[i] = f.compute(op, column[i], now)


def dependency_map(views: Sequence[OperatorView], features: Sequence[Feature]) -> tuple[tuple[int, ...], ...]:
    """Haren's bitmap D as rows of indices: running operator i may change the dependent features of D[i].

    Every row holds i itself (the diagonal); a dependent feature that spreads downstream adds i's
    subscribers, upstream its publishers. Empty rows when no feature is dependent.
    """
    spreads = {f.spreads_to for f in features if f.dependent}
    if not spreads:
        return tuple(() for _ in views)
    down = bool(spreads & {"downstream", "both"})
    up = bool(spreads & {"upstream", "both"})
    rows = []
    for v in views:
        row = dict.fromkeys((v.index, *(v.downstream if down else ()), *(v.upstream if up else ())))
        rows.append(tuple(row))
    return tuple(rows)
