"""Flow graph: composition, validation, fluent layer."""

from elastream.graph.flow import Connection, Flow, InputRef, OperatorHandle, OutputRef

__all__ = ["Connection", "Flow", "InputRef", "OperatorHandle", "OutputRef"]
