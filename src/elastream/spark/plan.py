"""Reading a flow for Spark: what each operator declares, as routes, keyed steps and layers.

:func:`plan_flow` matches on each operator's :class:`~elastream.operators.spec.OperatorSpec`
(its declared transform, key, kind and driver; DESIGN.md "Seams"), never on its
class: a coroutine operator, or one that declares no transform the translator
knows, is refused with :class:`SparkTranslationError` naming it.

Keyed steps are grouped into *layers*: layer ``d`` holds the keyed steps with
``d`` keyed steps on their longest path from the source (themselves
included); each layer becomes one ``applyInPandasWithState`` and the
stateless operators run inside the layer that produces their input.

A partitioned step's keys fall into its declared key groups (``spec.key_groups``,
:mod:`elastream.operators.keygroups`, the same groups the local engine moves);
Spark groups its rows by key group, so its state holds one entry per key group
(:mod:`elastream.spark.keygroup_state`). A stateful step is one group.

Threading: called on the driver; the plan's routes and steps are pickled to Spark's Python workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elastream.operators.keygroups import stable_hash
from elastream.operators.spec import Driver, Kind, OperatorSpec
from elastream.spark.failures import SparkTranslationError, fail_in_worker

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow
    from elastream.operators.base import Operator

#: The route of control rows that travel to the sinks (markers, end of stream).
CONTROL_ROUTE = -1
#: Declared transforms run inside a layer, one item at a time.
STATELESS_TRANSFORMS = ("map", "filter", "flat_map")
#: What the translator runs (for the error that refuses anything else).
KNOWN = ("Map, Filter, FlatMap, KeyedProcess, KeyedReduce, StatefulProcess and Union between one FromParquet "
         "source and Collect sinks")


@dataclass(frozen=True, slots=True)
class KeySpec:
    """How the rows bound for keyed step ``name`` are grouped: by ``key`` into ``groups`` key groups
    (partitioned), or all in one (stateful, ``key`` None)."""

    name: str
    key: Callable[[Any], Any] | None
    groups: int = 1

    def group_of(self, item: Any) -> int:
        """The key group of a data item: :func:`~elastream.operators.keygroups.key_group` of its key, as the
        local engine computes it (0 for a stateful step)."""
        if self.key is None:
            return 0
        try:
            return stable_hash(self.key(item)) % self.groups
        except Exception as exc:  # noqa: BLE001 - the key function is the keyed operator's code
            raise fail_in_worker(self.name, exc) from exc


@dataclass(frozen=True, slots=True)
class KeyedStep:
    """A partitioned (keyed_process, keyed_reduce) or stateful (stateful_process) operator, as declared.

    ``reduce`` marks a keyed_reduce (``step`` is then ``fn(acc, item)`` and
    ``factory`` its optional ``initial``); ``stage`` numbers it in the flow;
    ``groups`` is its number of key groups (1 for a stateful step).
    """

    name: str
    stage: int
    key: Callable[[Any], Any] | None
    step: Callable[..., Any]
    factory: Callable[[], Any] | None
    on_end: Callable[..., Iterable[Any]] | None
    reduce: bool = False
    groups: int = 1


@dataclass(frozen=True, slots=True)
class Route:
    """What a row delivered to operator ``name`` goes through, and where its outputs go next.

    ``what`` is "map", "filter", "flat_map" (``fn``), "union", "keyed"
    (grouped by ``key``), "sink" or "source"; ``consumers`` are (operator
    index, input port) pairs.
    """

    name: str
    what: str
    fn: Callable[..., Any] | None = None
    key: KeySpec | None = None
    consumers: tuple[tuple[int, int], ...] = ()


def _classify(name: str, op: Operator, stage: int) -> tuple[str, Any]:
    """What ``op``'s spec declares: (what, function, KeyedStep or source options); refuses what is local-only."""
    spec = op.spec()
    declared = spec.declared
    if spec.driver is Driver.COROUTINE or declared is None:
        raise _local_only(name, op, spec)
    match declared.transform:
        case "map" | "filter" | "flat_map":
            return declared.transform, declared.fn
        case "keyed_process" | "stateful_process" if declared.fn is not None:
            partitioned = spec.kind is Kind.PARTITIONED
            return "keyed", KeyedStep(name, stage, spec.key if partitioned else None, declared.fn, declared.state,
                                      declared.on_end, groups=max(1, spec.key_groups) if partitioned else 1)
        case "keyed_reduce" if declared.fn is not None:
            return "keyed", KeyedStep(name, stage, spec.key, declared.fn, declared.state, None, reduce=True,
                                      groups=max(1, spec.key_groups))
        case "union":
            return "union", None
        case "collect":
            return "sink", None
        case "parquet_source":
            return "source", dict(declared.options)
    raise _local_only(name, op, spec)


def _local_only(name: str, op: Operator, spec: OperatorSpec) -> SparkTranslationError:
    if spec.driver is Driver.COROUTINE:
        why = "is a coroutine operator (async def process)"
    else:
        transform = spec.declared.transform if spec.declared is not None else None
        why = (f"is not a declarative operator the Spark translator knows (kind {spec.kind.value!r}, "
               f"declared transform {transform!r})")
    return SparkTranslationError(f"operator {name!r} ({op.describe()}) {why}: it is local-only; Spark runs {KNOWN}",
                                 operator=name)


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """A flow read for Spark: one :class:`Route` per operator (by index), keyed steps grouped into layers.

    ``source_options`` are what the source declared (``files``: a callable
    listing its files in read order; ``columns``: a tuple or None).
    """

    routes: tuple[Route, ...]
    keyed: dict[int, KeyedStep]
    layers: tuple[tuple[int, ...], ...]
    source: int
    sinks: dict[int, str]
    source_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key_groups(self) -> tuple[tuple[int, int], ...]:
        """(route, key groups) of every keyed step: each of its key groups gets a copy of the end of stream."""
        return tuple((i, s.groups) for i, s in self.keyed.items())


def plan_flow(flow: Flow) -> FlowPlan:
    """Check that ``flow`` can run on Spark and read what each operator declares.

    Raises :class:`SparkTranslationError` naming the first operator that is
    local-only (a coroutine operator, a non-Parquet source, another sink), or
    when the flow has more than one source or a feedback loop.

    Example::

        plan = plan_flow(flow)
        [plan.routes[i].name for i in plan.layers[0]]     # the first layer's keyed steps
    """
    flow.validate()
    names = list(flow.operators)
    index = {n: i for i, n in enumerate(names)}
    declared = [_classify(n, flow[n].operator, i + 1) for i, n in enumerate(names)]
    consumers: list[list[tuple[int, int]]] = [[] for _ in names]
    inputs: list[list[int]] = [[] for _ in names]
    for c in flow.connections:
        consumers[index[c.src]].append((index[c.dst], c.dst_port))
        inputs[index[c.dst]].append(index[c.src])
    sources = [n for n, (what, _) in zip(names, declared) if what == "source"]
    if len(sources) != 1:
        raise SparkTranslationError(f"flow {flow.name!r} has {len(sources)} sources {sources}; the Spark "
                                    "translator feeds exactly one FromParquet stream in order",
                                    operator=sources[1] if sources else None)
    keyed = {i: s for i, (what, s) in enumerate(declared) if what == "keyed"}
    depth = _keyed_depths(names, inputs, keyed)
    routes = tuple(Route(n, what, fn if what in STATELESS_TRANSFORMS else None,
                         KeySpec(n, fn.key, fn.groups) if what == "keyed" else None, tuple(consumers[i]))
                   for i, (n, (what, fn)) in enumerate(zip(names, declared)))
    layers = tuple(tuple(i for i in keyed if depth[i] == d) for d in range(1, max(depth, default=0) + 1))
    source = index[sources[0]]
    return FlowPlan(routes, keyed, layers, source,
                    {i: n for i, (n, (what, _)) in enumerate(zip(names, declared)) if what == "sink"},
                    declared[source][1])


def _keyed_depths(names: list[str], inputs: list[list[int]], keyed: Mapping[int, KeyedStep]) -> list[int]:
    """Per operator, the most keyed steps on a path from the source to it (itself included)."""
    depth: dict[int, int] = {}
    visiting: set[int] = set()

    def visit(i: int) -> int:
        if i in depth:
            return depth[i]
        if i in visiting:
            raise SparkTranslationError(f"operator {names[i]!r} is on a feedback loop: loops are local-only",
                                        operator=names[i])
        visiting.add(i)
        depth[i] = max((visit(j) for j in inputs[i]), default=0) + (1 if i in keyed else 0)
        return depth[i]

    return [visit(i) for i in range(len(names))]
