"""Operator API (user-facing base classes)."""

from elastream.operators.base import FunctionOperator, Operator, SourceOperator, Status

__all__ = ["FunctionOperator", "Operator", "SourceOperator", "Status"]
