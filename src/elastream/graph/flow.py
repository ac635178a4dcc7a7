"""Flow composition: a flow is data (operators and stream connections).

Building a flow starts nothing; every backend compiles the same graph
(C-Stream §2.2, Listing 1). Only the thread that builds a flow touches it.

Example::

    flow = es.Flow("sample")
    src = flow.add(es.ops.FromIterable(range(10)), name="src")
    sink = flow.add(es.ops.Collect(), name="sink")
    src >> sink                         # port 0 -> port 0
    flow.connect(src.out(0), sink.in_(0))   # the same, spelled out (duplicate: rejected)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elastream.errors import FlowValidationError
from elastream.operators.base import Operator
from elastream.operators.user_code import check_operator

#: Priority classes a query may be tagged with (:meth:`Flow.tag_query`), lowest first.
PRIORITY_CLASSES = ("low", "high")
DEFAULT_PRIORITY = "low"

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.fluent import Stream


@dataclass(frozen=True, slots=True)
class OutputRef:
    """Output port ``port`` of operator ``name``."""

    handle: OperatorHandle
    port: int

    def __rshift__(self, other: InputRef | OperatorHandle) -> OperatorHandle:
        dst = other if isinstance(other, InputRef) else other.in_(0)
        self.handle.flow.connect(self, dst)
        return dst.handle

    def __str__(self) -> str:
        return f"{self.handle.name}.out({self.port})"


@dataclass(frozen=True, slots=True)
class InputRef:
    """Input port ``port`` of operator ``name``."""

    handle: OperatorHandle
    port: int

    def __str__(self) -> str:
        return f"{self.handle.name}.in_({self.port})"


@dataclass(frozen=True, slots=True)
class Connection:
    """A stream connection from an output port to an input port."""

    src: str
    src_port: int
    dst: str
    dst_port: int


class OperatorHandle:
    """The handle ``flow.add`` returns: names ports, and ``a >> b`` connects port 0 to port 0."""

    __slots__ = ("flow", "name", "operator")

    def __init__(self, flow: Flow, name: str, operator: Operator):
        self.flow = flow
        self.name = name
        self.operator = operator

    def out(self, i: int = 0) -> OutputRef:
        """Output port ``i``; raises FlowValidationError when out of range."""
        if not 0 <= i < self.operator.n_outputs:
            raise FlowValidationError(
                f"operator {self.name!r} has no output port {i} (it has {self.operator.n_outputs})",
                operator=self.name, port=f"out({i})")
        return OutputRef(self, i)

    def in_(self, i: int = 0) -> InputRef:
        """Input port ``i``; raises FlowValidationError when out of range."""
        if not 0 <= i < self.operator.n_inputs:
            raise FlowValidationError(
                f"operator {self.name!r} has no input port {i} (it has {self.operator.n_inputs})",
                operator=self.name, port=f"in_({i})")
        return InputRef(self, i)

    def __rshift__(self, other: InputRef | OperatorHandle) -> OperatorHandle:
        return self.out(0) >> other

    def __repr__(self) -> str:
        return f"<{type(self.operator).__name__} {self.name!r}>"


class Flow:
    """A streaming application: named operators joined by FIFO stream connections."""

    def __init__(self, name: str = "flow"):
        self.name = name
        self._handles: dict[str, OperatorHandle] = {}
        self._connections: list[Connection] = []
        self._auto_names: dict[str, int] = {}
        self._query_tags: dict[str, tuple[str, str]] = {}

    # -- composition -----------------------------------------------------
    def add(self, op: Operator, name: str | None = None) -> OperatorHandle:
        """Add operator ``op`` under a unique ``name`` (generated when omitted)."""
        if not isinstance(op, Operator):
            raise FlowValidationError(f"flow.add expects an es.Operator, got {type(op).__name__}",
                                      operator=name)
        _refuse_misdefined(op, name)
        if name is None:
            name = self._fresh_name(type(op).__name__.lower())
        if name in self._handles:
            raise FlowValidationError(f"duplicate operator name {name!r}", operator=name)
        if any(h.operator is op for h in self._handles.values()):
            raise FlowValidationError(f"operator instance added twice (as {name!r})", operator=name)
        handle = OperatorHandle(self, name, op)
        self._handles[name] = handle
        return handle

    def connect(self, src: OutputRef, dst: InputRef) -> Connection:
        """Connect output port ``src`` to input port ``dst`` (fan-out and fan-in allowed)."""
        if not isinstance(src, OutputRef) or not isinstance(dst, InputRef):
            raise FlowValidationError("connect(src, dst) takes handle.out(i) and handle.in_(j)")
        for ref in (src, dst):
            if self._handles.get(ref.handle.name) is not ref.handle:
                raise FlowValidationError(f"operator {ref.handle.name!r} belongs to another flow",
                                          operator=ref.handle.name)
        conn = Connection(src.handle.name, src.port, dst.handle.name, dst.port)
        if conn in self._connections:
            raise FlowValidationError(f"duplicate connection {src} -> {dst}",
                                      operator=dst.handle.name, port=f"in_({dst.port})")
        self._connections.append(conn)
        return conn

    def source(self, op: Any, name: str | None = None, *, query: str | None = None,
               priority: str | None = None) -> Stream:
        """Start a fluent pipeline from a source operator or any iterable.

        ``query`` / ``priority`` tag the source (see :meth:`tag_query`); the operators downstream of
        it belong to the same query unless tagged otherwise.
        """
        from elastream.graph.fluent import Stream, as_source

        if isinstance(op, Operator):
            _refuse_misdefined(op, name)  # before as_source reads its ports
        if priority is not None and query is None:
            raise FlowValidationError("flow.source(..., priority=...) needs query=... (the query it ranks)",
                                      operator=name)
        handle = self.add(as_source(op), name=name)
        if query is not None:
            self.tag_query(handle.name, query=query, priority=priority or DEFAULT_PRIORITY)
        return Stream(self, handle.out(0))

    def tag_query(self, *names: str, query: str, priority: str = "low") -> None:
        """Tag operators ``names`` as part of query ``query`` of priority class ``priority`` ("high" or "low").

        Scheduling policies that rank queries read the tags (Haren's Multi-class, ``haren:multiclass``).
        A query is otherwise a connected component of the flow; an untagged operator belongs to the
        query of the nearest tagged operator upstream of it.

        Example: ``flow.source(sensor, name="s", query="alerts", priority="high")`` or
        ``flow.tag_query("parse", "score", query="alerts", priority="high")``.
        """
        if priority not in PRIORITY_CLASSES:
            raise FlowValidationError(f"unknown priority class {priority!r}; choose one of "
                                      f"{', '.join(PRIORITY_CLASSES)}", operator=names[0] if names else None)
        for name in names:
            if name not in self._handles:
                raise FlowValidationError(f"no operator {name!r} in flow {self.name!r} to tag", operator=name)
            self._query_tags[name] = (str(query), priority)

    @property
    def query_tags(self) -> dict[str, tuple[str, str]]:
        """Operator name → (query, priority class), for the operators tagged with :meth:`tag_query`."""
        return dict(self._query_tags)

    def inherited_query_tags(self) -> dict[str, tuple[str, str]]:
        """:attr:`query_tags` plus every untagged operator downstream of a tagged one, with the nearest
        tagged upstream operator's tag (what a part of the flow run in another process must be told)."""
        tags = dict(self._query_tags)
        downstream: dict[str, list[str]] = {name: [] for name in self._handles}
        for c in self._connections:
            downstream[c.src].append(c.dst)
        frontier = deque(tags)  # breadth first from every tagged operator at once: the nearest tag wins
        while frontier:
            name = frontier.popleft()
            for dst in downstream[name]:
                if dst not in tags:
                    tags[dst] = tags[name]
                    frontier.append(dst)
        return tags

    # -- inspection --------------------------------------------------------
    @property
    def operators(self) -> dict[str, OperatorHandle]:
        """Operators by name, in insertion order."""
        return dict(self._handles)

    @property
    def connections(self) -> list[Connection]:
        """All stream connections."""
        return list(self._connections)

    def __getitem__(self, name: str) -> OperatorHandle:
        return self._handles[name]

    def validate(self) -> None:
        """Check the graph; raise FlowValidationError naming the operator and port."""
        from elastream.graph.validate import validate

        validate(self)

    def _fresh_name(self, base: str) -> str:
        while True:
            n = self._auto_names.get(base, 0) + 1
            self._auto_names[base] = n
            name = f"{base}_{n}"
            if name not in self._handles:
                return name

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, {len(self._handles)} operators, {len(self._connections)} connections)"


def _refuse_misdefined(op: Operator, name: str | None) -> None:
    """Refuse, at build time, an operator class the runtime could not drive (see ``check_operator``)."""
    problem = check_operator(op, name)
    if problem is not None:
        raise FlowValidationError(problem, operator=name)
