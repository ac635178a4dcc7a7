"""Build-time validation of a flow graph.

Each error names the operator and port (C-Stream §3.2.2 for cycles: a feedback
loop must pass through an input port declared ``control``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastream.errors import FlowValidationError

if TYPE_CHECKING:  # pragma: no cover
    from elastream.graph.flow import Flow


def validate(flow: Flow) -> None:
    """Raise FlowValidationError for the first problem found in ``flow``."""
    _check_not_empty(flow)
    _check_ports_in_range(flow)
    _check_inputs_connected(flow)
    _check_required_outputs(flow)
    _check_has_source(flow)
    _check_outputs_lead_somewhere(flow)
    _check_cycles(flow)


def _check_not_empty(flow: Flow) -> None:
    if not flow.operators:
        raise FlowValidationError(f"flow {flow.name!r} has no operators")


def _check_ports_in_range(flow: Flow) -> None:
    ops = flow.operators
    for c in flow.connections:
        if not 0 <= c.src_port < ops[c.src].operator.n_outputs:
            raise FlowValidationError(f"operator {c.src!r} has no output port {c.src_port}",
                                      operator=c.src, port=f"out({c.src_port})")
        if not 0 <= c.dst_port < ops[c.dst].operator.n_inputs:
            raise FlowValidationError(f"operator {c.dst!r} has no input port {c.dst_port}",
                                      operator=c.dst, port=f"in_({c.dst_port})")


def _check_inputs_connected(flow: Flow) -> None:
    fed = {(c.dst, c.dst_port) for c in flow.connections}
    for name, h in flow.operators.items():
        for i in range(h.operator.n_inputs):
            if (name, i) not in fed:
                raise FlowValidationError(f"input port {i} of operator {name!r} is not connected",
                                          operator=name, port=f"in_({i})")


def _check_required_outputs(flow: Flow) -> None:
    used = {(c.src, c.src_port) for c in flow.connections}
    for name, h in flow.operators.items():
        for i in sorted(h.operator.required_outputs()):
            if (name, i) not in used:
                raise FlowValidationError(
                    f"output port {i} of operator {name!r} must be connected "
                    f"(its tuples would otherwise be lost)", operator=name, port=f"out({i})")


def _check_has_source(flow: Flow) -> None:
    if not any(h.operator.n_inputs == 0 for h in flow.operators.values()):
        raise FlowValidationError(f"flow {flow.name!r} has no source operator (one with no inputs)")


def _check_outputs_lead_somewhere(flow: Flow) -> None:
    """Refuse operators whose every output port is unconnected: what they emit would be lost unseen.

    An operator with no output ports is a sink and ends a flow; one with several may leave some unused
    (a file source's dead-letter port when nothing is malformed), but not all of them.
    """
    used = {c.src for c in flow.connections}
    dangling = [name for name, h in flow.operators.items() if h.operator.n_outputs and name not in used]
    if not dangling:
        return
    names = ", ".join(f"{n!r} ({flow.operators[n].operator.describe()})" for n in dangling)
    which = "operator" if len(dangling) == 1 else "operators"
    raise FlowValidationError(
        f"flow {flow.name!r}: the output of {which} {names} goes nowhere, so its tuples would be lost "
        f"(the flow has no sink there); end the pipeline with a sink, e.g. .sink(es.ops.Collect()) or a "
        f"file sink such as .sink(es.ops.ToJSONL(path))", operator=dangling[0], port="out(0)")


def _check_cycles(flow: Flow) -> None:
    """Depth-first search over non-control edges; any back edge is an illegal cycle."""
    ops = flow.operators
    succ: dict[str, list[tuple[str, int]]] = {n: [] for n in ops}
    for c in flow.connections:
        if c.dst_port not in ops[c.dst].operator.control_inputs:
            succ[c.src].append((c.dst, c.dst_port))
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(ops, white)
    for root in ops:
        if color[root] != white:
            continue
        color[root] = grey
        stack = [(root, iter(succ[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = black
                stack.pop()
                continue
            dst, port = nxt
            if color[dst] == grey:
                path = [n for n, _ in stack[[n for n, _ in stack].index(dst):]] + [dst]
                raise FlowValidationError(
                    f"cycle {' -> '.join(path)} does not pass through a control input port "
                    f"(enters {dst!r} at in_({port}))", operator=dst, port=f"in_({port})")
            if color[dst] == white:
                color[dst] = grey
                stack.append((dst, iter(succ[dst])))
