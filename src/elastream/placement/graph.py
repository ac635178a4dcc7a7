"""The placement graph: tasks with CPU weights joined by directed traffic (TurboStream §V).

A :class:`PlacementGraph` is what the coarse-grained scheduler works on: one
task per operator (or replica) with a weight (its CPU cost per period) and one
directed edge per communicating pair with its traffic (messages per period).
It is built either

* **offline** from an elastream flow with :meth:`PlacementGraph.from_flow`:
  declared per-tuple costs (an operator's ``cost_us``, as ``es.ops.Busy`` has)
  times the rate each operator sees, the rate propagated from the sources
  along the graph with each operator's ``selectivity`` when it declares one; or
* **online** from the monitor's counters with
  :meth:`PlacementGraph.from_measurements` (§V.D: messages sent from each task
  to each downstream task, and CPU seconds per task, over one period T), or
  straight from two statistics snapshots with :meth:`PlacementGraph.from_stats`.

Weights and traffic only need consistent units within one graph.

Pure data: immutable after construction, no runtime dependency, safe to share
between threads and to pickle into worker processes.

Example::

    g = PlacementGraph({"a": 1.0, "b": 2.0, "c": 1.0}, {("a", "b"): 5, ("b", "c"): 1})
    g.tasks                      # ('a', 'b', 'c'): topological, ties by name
    g.neighbours("b")            # (('a', 5.0), ('c', 1.0)): heaviest traffic first
"""

from __future__ import annotations

import heapq
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from numbers import Real
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow
    from elastream.metrics.stats import FlowStats

Edge = tuple[str, str]

#: Per-tuple cost (µs) of an operator that declares none.
DEFAULT_COST_US = 1.0
#: Tuples per period a source emits when no rate is given.
DEFAULT_RATE = 1.0

_DIGITS = re.compile(r"(\d+)")


def name_key(name: str) -> tuple[tuple[Any, ...], str]:
    """Deterministic tie-breaking key: natural order ('busy_2' < 'busy_10'), then the raw name.

    Example: ``sorted(["t10", "t2"], key=name_key) == ["t2", "t10"]``
    """
    parts = _DIGITS.split(name)  # text at even indices, digit runs at odd ones
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


class PlacementGraph:
    """Tasks with non-negative weights and directed edges with non-negative traffic.

    ``weights`` maps every task to its CPU cost per period; ``traffic`` maps
    ``(src, dst)`` to messages per period (every endpoint must be a task; no
    self-loops, since a task's traffic to itself never crosses processes).
    ``tasks`` lists the tasks in one canonical order — topological, ties by
    :func:`name_key`, a cycle entered at its smallest name — which is the
    visiting order of the algorithms, so plans do not depend on dict order.
    """

    __slots__ = ("_tasks", "_weights", "_traffic", "_neighbours")

    def __init__(self, weights: Mapping[str, float], traffic: Mapping[Edge, float] | None = None):
        w = {_check_name(t): _check_amount(x, f"weight of task {t!r}") for t, x in weights.items()}
        e: dict[Edge, float] = {}
        for (src, dst), x in (traffic or {}).items():
            for end in (src, dst):
                if end not in w:
                    raise ValueError(f"traffic edge {src!r} -> {dst!r} names unknown task {end!r}")
            if src == dst:
                raise ValueError(f"self-loop on task {src!r}: a task's traffic to itself never crosses processes")
            e[(src, dst)] = _check_amount(x, f"traffic {src!r} -> {dst!r}")
        self._tasks = _canonical_order(w, e)
        self._weights = MappingProxyType({t: w[t] for t in self._tasks})
        self._traffic = MappingProxyType(dict(sorted(e.items(), key=lambda kv: (name_key(kv[0][0]),
                                                                              name_key(kv[0][1])))))
        self._neighbours = MappingProxyType(_undirected_neighbours(self._tasks, e))

    # -- builders ------------------------------------------------------------
    @classmethod
    def from_flow(cls, flow: Flow, costs: Mapping[str, float] | None = None,
                  rates: Mapping[str, float] | None = None) -> PlacementGraph:
        """Offline mode: the flow's graph with declared or estimated costs.

        A task's weight is its per-tuple cost (``costs[name]``, else the
        operator's ``cost_us``, else :data:`DEFAULT_COST_US`) times the tuples
        per period entering it (``rates[name]``, else the sum of its incoming
        traffic; a source emits ``rates[name]`` or :data:`DEFAULT_RATE`). An
        operator emits its input rate times its ``selectivity`` (1 when it
        declares none), split evenly over its connected output ports; every
        connection of a port carries that port's full rate.

        Example::

            flow, _ = build_topology("chain", n_tuples=1, cost_us=100, selectivity=1, gil="hold")
            PlacementGraph.from_flow(flow).weights["busy_0"]     # 100.0
        """
        ops = {name: handle.operator for name, handle in flow.operators.items()}
        costs, rates = dict(costs or {}), dict(rates or {})
        for label, given in (("costs", costs), ("rates", rates)):
            unknown = sorted(set(given) - set(ops), key=name_key)
            if unknown:
                raise ValueError(f"{label} name operators not in flow {flow.name!r}: {unknown}")
        conns = flow.connections
        downstream: dict[str, list[str]] = defaultdict(list)
        ports: dict[str, set[int]] = defaultdict(set)
        for c in conns:
            downstream[c.src].append(c.dst)
            ports[c.src].add(c.src_port)
        fed = {c.dst for c in conns}
        order = _canonical_order(ops, {(c.src, c.dst): 0.0 for c in conns})
        position = {name: i for i, name in enumerate(order)}
        in_rate: dict[str, float] = defaultdict(float)
        port_rate: dict[str, float] = {}
        weights: dict[str, float] = {}
        for name in order:
            spec = ops[name].spec()
            default = in_rate[name] if name in fed else DEFAULT_RATE
            rate = _check_amount(rates.get(name, default), f"rate of {name!r}")
            cost = _check_amount(costs[name], f"cost of {name!r}") if name in costs \
                else _declared(spec.cost_us, DEFAULT_COST_US)
            weights[name] = cost * rate
            out = rate * _declared(spec.selectivity, 1.0)
            port_rate[name] = out / len(ports[name]) if ports[name] else 0.0
            for dst in downstream[name]:  # feed tasks not yet visited (a feedback edge feeds nothing)
                if position[dst] > position[name]:
                    in_rate[dst] += port_rate[name]
        traffic: dict[Edge, float] = defaultdict(float)
        for c in conns:  # parallel connections between one pair of operators add up
            if c.src != c.dst:
                traffic[(c.src, c.dst)] += port_rate[c.src]
        return cls(weights, traffic)

    @classmethod
    def from_measurements(cls, traffic: Mapping[Edge, float], cpu_s: Mapping[str, float]) -> PlacementGraph:
        """Online mode (§V.D): one period's messages per ``(src, dst)`` and CPU seconds per task.

        A task seen only in ``traffic`` weighs 0; a task's messages to itself
        are dropped (they never cross processes).

        Example::

            g = PlacementGraph.from_measurements({("src", "map"): 900, ("map", "sink"): 900},
                                                 {"src": 0.01, "map": 0.4, "sink": 0.02})
        """
        weights = dict(cpu_s)
        for src, dst in traffic:
            weights.setdefault(src, 0.0)
            weights.setdefault(dst, 0.0)
        return cls(weights, {edge: x for edge, x in traffic.items() if edge[0] != edge[1]})

    @classmethod
    def from_stats(cls, stats: FlowStats, previous: FlowStats | None = None) -> PlacementGraph:
        """Online mode from a run's statistics snapshot (``OperatorStats.sent`` and ``.cpu_s``).

        The counters are cumulative; with ``previous`` (the snapshot one period
        earlier) the graph holds just that period's traffic and CPU time.

        Example::

            before = handle.stats(); ...; graph = PlacementGraph.from_stats(handle.stats(), before)
        """
        old = previous.operators if previous is not None else {}
        traffic: dict[Edge, float] = {}
        cpu_s: dict[str, float] = {}
        for name, op in stats.operators.items():
            prev = old.get(name)
            cpu_s[name] = max(0.0, op.cpu_s - (prev.cpu_s if prev is not None else 0.0))
            for dst, n in op.sent.items():
                traffic[(name, dst)] = max(0, n - (prev.sent.get(dst, 0) if prev is not None else 0))
        return cls.from_measurements(traffic, cpu_s)

    # -- inspection ----------------------------------------------------------
    @property
    def tasks(self) -> tuple[str, ...]:
        """Every task, in the canonical visiting order."""
        return self._tasks

    @property
    def weights(self) -> Mapping[str, float]:
        """Task → CPU cost per period (read-only)."""
        return self._weights

    @property
    def traffic(self) -> Mapping[Edge, float]:
        """``(src, dst)`` → messages per period (read-only)."""
        return self._traffic

    @property
    def total_weight(self) -> float:
        """Sum of every task's weight."""
        return math.fsum(self._weights.values())

    @property
    def total_traffic(self) -> float:
        """Sum of every edge's traffic."""
        return math.fsum(self._traffic.values())

    def neighbours(self, task: str) -> tuple[tuple[str, float], ...]:
        """Input and output tasks of ``task`` with the traffic both ways, heaviest first, ties by name."""
        return self._neighbours[task]

    def crossing_traffic(self, side: Mapping[str, object]) -> float:
        """Traffic of the edges whose two ends map to different values of ``side`` (e.g. processes)."""
        return math.fsum(x for (src, dst), x in self._traffic.items() if side[src] != side[dst])

    def __len__(self) -> int:
        return len(self._tasks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlacementGraph):
            return NotImplemented
        return dict(self._weights) == dict(other._weights) and dict(self._traffic) == dict(other._traffic)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"PlacementGraph({len(self._tasks)} tasks, {len(self._traffic)} edges, "
                f"weight {self.total_weight:g}, traffic {self.total_traffic:g})")


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"task names must be str, got {name!r}")
    return name


def _check_amount(x: object, what: str) -> float:
    """A finite non-negative number, as float; ValueError naming ``what`` otherwise."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise ValueError(f"{what} must be a number, got {x!r}")
    value = float(x)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be finite and >= 0, got {x!r}")
    return value


def _declared(x: object, default: float) -> float:
    """A spec's declared amount (``cost_us``, ``selectivity``) if it is a finite number >= 0, else ``default``."""
    if isinstance(x, bool) or not isinstance(x, Real) or not math.isfinite(x) or x < 0:
        return default
    return float(x)


def _canonical_order(tasks: Iterable[str], edges: Iterable[Edge]) -> tuple[str, ...]:
    """Kahn's topological order, smallest :func:`name_key` first among ready tasks.

    When only cycles remain, the cycle's smallest remaining task is taken next,
    so every graph (feedback loops included) has one deterministic order.
    """
    names = list(tasks)
    succ: dict[str, set[str]] = {t: set() for t in names}
    indeg = dict.fromkeys(names, 0)
    for src, dst in edges:
        if src != dst and dst not in succ[src]:
            succ[src].add(dst)
            indeg[dst] += 1
    ready = [(name_key(t), t) for t in names if indeg[t] == 0]
    heapq.heapify(ready)
    remaining = {t: name_key(t) for t in names}
    order: list[str] = []
    while remaining:
        if not ready:  # only cycles left: enter one at its smallest name
            t = min(remaining, key=remaining.__getitem__)
            heapq.heappush(ready, (remaining[t], t))
        _, t = heapq.heappop(ready)
        if t not in remaining:
            continue
        del remaining[t]
        order.append(t)
        for u in succ[t]:
            indeg[u] -= 1
            if indeg[u] == 0 and u in remaining:
                heapq.heappush(ready, (remaining[u], u))
    return tuple(order)


def _undirected_neighbours(tasks: Iterable[str], edges: Mapping[Edge, float]) -> dict[str, tuple[tuple[str, float], ...]]:
    """Per task, its neighbours with the traffic summed over both directions, heaviest first, ties by name."""
    both: dict[str, dict[str, float]] = {t: {} for t in tasks}
    for (src, dst), x in edges.items():
        both[src][dst] = both[src].get(dst, 0.0) + x
        both[dst][src] = both[dst].get(src, 0.0) + x
    return {t: tuple(sorted(nb.items(), key=lambda kv: (-kv[1], name_key(kv[0])))) for t, nb in both.items()}
