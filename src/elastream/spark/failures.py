"""How the Spark translation reports a flow it cannot run and an operator that failed in a Spark worker.

A step that raises in a Python worker raises :func:`fail_in_worker`'s
RuntimeError, whose text carries the operator's name through Spark's own error
(a Java exception wrapping the Python traceback); the driver turns it back into
an :class:`~elastream.errors.OperatorError` naming that operator (:func:`query_error`).

Threading: pure functions; ``fail_in_worker`` runs in Spark's Python workers, ``query_error`` on the driver.
"""

from __future__ import annotations

import re
from typing import Any

from elastream.errors import ElastreamError, FlowValidationError, OperatorError


class SparkTranslationError(FlowValidationError):
    """A flow cannot run on Spark; ``operator`` names the operator that stays local-only."""


class SparkRunOptionError(ElastreamError, ValueError):
    """Options of a Spark run that cannot work (a checkpoint folder of another run, flags that need others)."""


class RunIncomplete(ElastreamError):
    """A run stopped on purpose before the end of its stream (a micro-batch limit); its kept folder carries it on."""


_FAILURE = re.compile(r"\[elastream operator '([^']+)'\] ([^\n]*)")


def fail_in_worker(name: str, exc: Exception) -> RuntimeError:
    """The error a step raises in a Spark worker; the driver finds the operator name in it (:func:`query_error`).

    Example: ``query_error(fail_in_worker("boom", ValueError("x"))).operator == "boom"``
    """
    return RuntimeError(f"[elastream operator '{name}'] {type(exc).__name__}: {exc}")


def query_error(exc: Any) -> Exception:
    """An OperatorError naming the operator when a step failed in a worker; else a RuntimeError."""
    text = str(exc) if exc is not None else "the streaming query stopped"
    m = _FAILURE.search(text)
    if m is None:
        return RuntimeError(f"Spark streaming query failed: {text}")
    return OperatorError(m.group(1), RuntimeError(m.group(2)), text)
