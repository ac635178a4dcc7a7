"""Exceptions raised by elastream.

Build-time problems raise :class:`FlowValidationError` (naming the operator and
port); a failure inside an operator at run time raises :class:`OperatorError`
(naming the operator, with the original exception as ``cause`` and
``__cause__`` and its formatted traceback in ``details``).

An operator's failure is reported once: :func:`operator_traceback` cuts the
engine's own frames (the worker loop, the task driver, the operator's batch
loop) off the front of the original exception's traceback, so what Python
prints is the user's code, the exception and its notes (the record it failed
on), followed by the one-line :class:`OperatorError`.
"""

from __future__ import annotations

import os
import traceback
from types import TracebackType
from typing import Any

#: Frames from files under this folder are the engine's own (the elastream package).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: The file name cloudpickle gives code it ships by value (a worker process's copy of a ``__main__`` function).
_SHIPPED_CODE = "<dynamic-code>"


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

    ``operator`` is the operator's name; ``cause`` (also ``__cause__``) the
    original exception, its traceback starting at the user's code (see
    :func:`operator_traceback`); ``details`` that traceback as text, which is
    all a failure in a worker process can send back. ``partial`` is what the
    run had produced when it stopped (a ``RunResult``: what every sink
    accepted, its statistics), or None where that could not be gathered.

    ``str(error)`` is one line naming the operator and the exception; when the
    cause carries no traceback of its own (it came from another process as
    text) the text of ``details`` follows, so the traceback is shown once.

    Example::

        try:
            es.Runner().run(flow)
        except es.OperatorError as error:
            print(error.operator, type(error.cause).__name__)
    """

    def __init__(self, operator: str, cause: BaseException, details: str, partial: Any = None, *,
                 summary: str | None = None):
        # summary: "Type: text" of the original exception when ``cause`` only stands for it (another process).
        what = summary if summary is not None else f"{type(cause).__name__}: {cause}"
        super().__init__(f"operator {operator!r} failed: {what}")
        self.operator = operator
        self.cause = cause
        self.details = details
        self.partial = partial
        self.__cause__ = cause

    def __str__(self) -> str:
        headline = super().__str__()
        if self.details and self.cause.__traceback__ is None:
            return f"{headline}\n{self.details.rstrip()}"
        return headline


class RecordError(ElastreamError):
    """A malformed input record under the ``fail`` error policy.

    Names the file, the line (1-based) and the reason.
    """

    def __init__(self, path: str, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


def operator_traceback(error: BaseException) -> str:
    """Cut the engine's frames off the front of ``error``'s traceback; return it formatted.

    The worker loop, the task driver and an operator's batch loop sit above
    the user's function in every operator failure: they are dropped, from
    ``error`` itself and from the exceptions chained to it, so the user's
    code comes first. When no frame of the user's code is there at all (an
    elastream operator raised on its own), the frame that raised is kept. The
    text includes the exception's notes (the record an operator failed on).

    Example::

        except Exception as exc:
            details = operator_traceback(exc)
    """
    for exc in _chain(error):
        exc.__traceback__ = _from_user_code(exc.__traceback__)
    report = traceback.TracebackException.from_exception(error)
    _name_shipped_files(report, error)
    return "".join(report.format())


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception chained to it (causes and contexts), each once."""
    found: dict[int, BaseException] = {}
    pending: list[BaseException | None] = [error]
    while pending:
        exc = pending.pop()
        if exc is not None and id(exc) not in found:
            found[id(exc)] = exc
            pending += [exc.__cause__, exc.__context__]
    return list(found.values())


def _from_user_code(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame outside the elastream package; its innermost frame when all are inside."""
    while tb is not None and tb.tb_next is not None and _is_engine_frame(tb):
        tb = tb.tb_next
    return tb


def _is_engine_frame(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)


def _name_shipped_files(report: traceback.TracebackException, error: BaseException) -> None:
    """Give frames of functions shipped to a worker process by value their file back.

    cloudpickle rebuilds such code with the file name ``<dynamic-code>``, so
    the traceback would show neither file nor source line; the function's
    globals still hold the module's ``__file__``.
    """
    pairs = [(report, error)]
    while pairs:
        te, exc = pairs.pop()
        frames = [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]
        if len(frames) == len(te.stack):
            for i, (summary, frame) in enumerate(zip(te.stack, frames)):
                path = frame.f_globals.get("__file__")
                if summary.filename == _SHIPPED_CODE and isinstance(path, str):
                    te.stack[i] = traceback.FrameSummary(
                        path, summary.lineno, summary.name, end_lineno=summary.end_lineno,
                        colno=summary.colno, end_colno=summary.end_colno)
        if te.__cause__ is not None and exc.__cause__ is not None:
            pairs.append((te.__cause__, exc.__cause__))
        if te.__context__ is not None and exc.__context__ is not None:
            pairs.append((te.__context__, exc.__context__))
