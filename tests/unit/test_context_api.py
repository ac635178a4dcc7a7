"""The operator API's view of the runtime: the context Protocols and the untrack helper.

The standard operators reach the runtime only through the operator API, so
the Protocols of :mod:`elastream.operators.context_api` must name only what the
runtime's classes really offer, and :mod:`elastream.ops` must not import
:mod:`elastream.runtime` at all.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

import elastream.ops
from elastream.operators import context_api, untrack
from elastream.runtime import gc_tuning
from elastream.runtime.context import Context, InputPort, OutputPort

#: Attributes the runtime sets per instance (in __init__), not on the class.
INSTANCE_ATTRIBUTES = {Context: {"name", "logger", "inputs", "outputs"}, InputPort: {"index"},
                       OutputPort: {"index"}}


def protocol_members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_") or name == "__len__"} - {
        "__module__", "__doc__", "__dict__", "__weakref__", "__parameters__", "__protocol_attrs__",
        "__abstractmethods__", "__subclasshook__", "__init__", "__non_callable_proto_members__"}


@pytest.mark.parametrize("protocol, runtime_class", [
    (context_api.OperatorContext, Context),
    (context_api.OperatorInputPort, InputPort),
    (context_api.OperatorOutputPort, OutputPort)])
def test_the_runtime_classes_offer_every_member_of_the_protocols(protocol: type, runtime_class: type):
    members = protocol_members(protocol)
    assert members, protocol
    missing = {m for m in members if not hasattr(runtime_class, m)} - INSTANCE_ATTRIBUTES[runtime_class]
    assert not missing, f"{runtime_class.__name__} lacks {sorted(missing)}"


def test_the_standard_operators_import_nothing_from_the_runtime():
    offenders = []
    for path in sorted(Path(elastream.ops.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("elastream.runtime")]
    assert offenders == []


def test_gc_tuning_reexports_the_operator_layers_untrack():
    assert gc_tuning.untrack_atomic is untrack.untrack_atomic
    assert gc_tuning._untrack_atomic is untrack.extension_untrack()


@pytest.mark.skipif(untrack.extension_untrack() is None, reason="built without the C extension")
def test_untrack_atomic_untracks_tuples_of_atomic_values():
    n = len(gc.get_objects())  # a run-time value: tuples of literals are untracked constants already
    items = [(n, "a"), (n, [3])]
    assert untrack.untrack_atomic(items) == 1
    assert not gc.is_tracked(items[0]) and gc.is_tracked(items[1])


def test_without_the_extension_untrack_atomic_does_nothing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(untrack, "EXTENSION", "elastream.operators._no_such_extension")
    monkeypatch.setattr(untrack, "_extension", untrack._NOT_LOADED)
    n = len(gc.get_objects())
    items = [(n, "a")]
    assert untrack.untrack_atomic(items) == 0
    assert untrack.extension_untrack() is None and gc.is_tracked(items[0])
