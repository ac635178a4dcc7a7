"""Shared pieces of the file operators: error policies, dead letters, results.

A file source meets malformed records (a CSV row with the wrong field count, a
JSON line that does not parse). What happens to them is the source's error
policy (DESIGN.md "What done means"): ``fail`` stops the flow with a
:class:`~elastream.errors.RecordError`, ``skip`` drops and counts them
(``OperatorStats.malformed``), ``dead_letter`` sends a :class:`DeadLetter` to
output port 1. :class:`RecordSource` implements the three policies once, for
every source that parses records.

Threading: a source runs in one worker at a time (its ``max_workers`` is 1), so
the state here is never touched by two threads at once; the worker running the
source may change between batches, which is harmless because nothing here is
thread-local.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elastream.errors import RecordError
from elastream.operators.base import SourceOperator

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.context_api import OperatorContext

#: Port on which ``dead_letter`` sources emit their :class:`DeadLetter` records.
DEAD_LETTER_PORT = 1


class ErrorPolicy(str, enum.Enum):
    """What a file source does with a malformed record."""

    FAIL = "fail"
    """Stop the flow: the source raises RecordError(path, line, reason)."""
    SKIP = "skip"
    """Drop the record and count it in ``OperatorStats.malformed``."""
    DEAD_LETTER = "dead_letter"
    """Emit a DeadLetter on output port 1 (which must then be connected)."""

    @classmethod
    def parse(cls, value: str | ErrorPolicy) -> ErrorPolicy:
        """The policy named ``value``; ValueError for anything else.

        Example::

            >>> ErrorPolicy.parse("skip")
            <ErrorPolicy.SKIP: 'skip'>
        """
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(repr(p.value) for p in cls)
            raise ValueError(f"on_error must be one of {choices}, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A malformed record routed to a source's dead-letter port.

    ``line`` is 1-based (the first physical line of the record); ``raw`` is the
    record's text without its final newline (undecodable bytes appear as
    backslash escapes).
    """

    path: str
    line: int
    reason: str
    raw: str


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """What a file sink reports in ``RunResult.outputs[name]``: where and how many rows."""

    path: str
    rows: int


class RecordSource(SourceOperator):
    """A file source whose malformed records follow an error policy.

    Subclasses implement :meth:`_read` (parse up to ``max_items`` records into
    a list, call :meth:`_reject` for each malformed one, call :meth:`_eof` at
    the end of the file) plus ``open``/``close`` for the file itself; this class
    turns that into the ``next_batch`` / ``take_side_outputs`` protocol of
    :class:`~elastream.operators.base.SourceOperator`.
    """

    def __init__(self, path: str | os.PathLike[str], on_error: str | ErrorPolicy = "fail"):
        self.on_error = ErrorPolicy.parse(on_error)
        # Port 1 exists only under dead_letter, so the other policies need no extra wiring.
        super().__init__(outputs=2 if self.on_error is ErrorPolicy.DEAD_LETTER else 1)
        self.path = os.fspath(path)
        self._ctx: OperatorContext | None = None
        self._dead: list[DeadLetter] = []
        self._deferred: RecordError | None = None
        self._at_eof = False

    def required_outputs(self) -> frozenset[int]:
        # Unconnected, the dead letters would vanish: validation must refuse that.
        if self.on_error is ErrorPolicy.DEAD_LETTER:
            return frozenset({DEAD_LETTER_PORT})
        return frozenset()

    def open(self, ctx: OperatorContext) -> None:
        """Reset the per-run state; subclasses open their file after calling this."""
        self._ctx = ctx
        self._dead = []
        self._deferred = None
        self._at_eof = False

    def next_batch(self, max_items: int) -> list | None:
        """Up to ``max_items`` good records; None once the file is exhausted.

        A call reads at most ``max_items`` lines or records, good or bad, so one
        activation stays bounded even in a file full of malformed records; it
        may therefore return an empty list before the end.
        """
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        if self._at_eof:
            return None
        out: list = []
        try:
            self._read(out, max_items)
        except RecordError as exc:
            if not out:
                raise
            # Emit the good records that precede the bad one first, so the
            # stream holds everything up to the failure; raise on the next call.
            self._deferred = exc
        # The runtime ignores side outputs of a call that returns None, so a
        # batch that reached the end still returns a list when it has dead letters.
        if not out and self._at_eof and not self._dead:
            return None
        return out

    def take_side_outputs(self) -> list[tuple[int, list]]:
        """The dead letters of the last batch, for port 1 (see SourceOperator)."""
        if not self._dead:
            return []
        dead, self._dead = self._dead, []
        return [(DEAD_LETTER_PORT, dead)]

    # -- for subclasses ------------------------------------------------------------------
    def _read(self, out: list, max_items: int) -> None:
        raise NotImplementedError

    def _eof(self) -> None:
        self._at_eof = True

    def _reject(self, line: int, reason: str, raw: str) -> None:
        """Apply the error policy to the malformed record starting at ``line``."""
        policy = self.on_error
        if policy is ErrorPolicy.FAIL:
            raise RecordError(self.path, line, reason)
        if policy is ErrorPolicy.SKIP:
            if self._ctx is not None:
                self._ctx.count_malformed(1)
            return
        self._dead.append(DeadLetter(self.path, line, reason, raw))

    def describe(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


def format_value(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error reasons."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
