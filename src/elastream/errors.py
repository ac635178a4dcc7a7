"""Exceptions raised by elastream.

Build-time problems raise :class:`FlowValidationError` (naming the operator and
port); a failure inside an operator at run time raises :class:`OperatorError`
(naming the operator, with the original exception as ``__cause__`` and its
formatted traceback in ``details``).
"""

from __future__ import annotations

from typing import Any


class ElastreamError(Exception):
    """Base class of every error elastream raises on purpose."""


class FlowValidationError(ElastreamError):
    """The flow graph is invalid; raised before anything runs.

    Attributes name the offending operator and port where there is one.
    """

    def __init__(self, message: str, *, operator: str | None = None, port: str | None = None):
        super().__init__(message)
        self.operator = operator
        self.port = port


class OperatorError(ElastreamError):
    """An operator raised while the flow ran; the flow was stopped.

    ``operator`` is the operator's name, ``__cause__`` the original exception and
    ``details`` its formatted traceback. ``partial`` is what the run had produced
    when it stopped (a ``RunResult``: what every sink accepted, its statistics),
    or None where that could not be gathered.
    """

    def __init__(self, operator: str, cause: BaseException, details: str, partial: Any = None):
        super().__init__(f"operator {operator!r} failed: {type(cause).__name__}: {cause}\n{details}")
        self.operator = operator
        self.details = details
        self.partial = partial


class RecordError(ElastreamError):
    """A malformed input record under the ``fail`` error policy.

    Names the file, the line (1-based) and the reason.
    """

    def __init__(self, path: str, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason
