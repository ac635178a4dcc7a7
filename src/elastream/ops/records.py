"""Shared pieces of the file operators: error policies, dead letters, results.

A file sink meets records of many kinds: :class:`RowShape` reads named fields
out of dicts, dataclasses, named tuples, and tuples or lists given column
names, the same way for every sink, and says what is accepted when a record is
none of these.

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

import dataclasses
import enum
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
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


#: What a file sink takes, for its error messages.
ACCEPTED_RECORDS = ("dicts, dataclasses, named tuples (such as es.ops.WindowResult), "
                    "or tuples and lists together with columns=[...]")


class RecordShapeError(TypeError):
    """A record a file sink cannot write: not one of :data:`ACCEPTED_RECORDS`, or unlike the first record."""


def is_record_object(value: Any) -> bool:
    """True for a dataclass instance or a named tuple: a record whose fields have names."""
    return _is_named_tuple(value) or (dataclasses.is_dataclass(value) and not isinstance(value, type))


def field_names(value: Any) -> tuple[str, ...]:
    """The field names of a dataclass instance or named tuple, in declaration order."""
    if _is_named_tuple(value):
        return tuple(value._fields)
    return tuple(f.name for f in dataclasses.fields(value))


def _is_named_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple)


@dataclass(frozen=True)
class RowShape:
    """How a file sink reads one row out of a record, decided by its first record.

    ``kind`` is ``"dict"``, ``"dataclass"``, ``"named tuple"`` or
    ``"sequence"`` (a tuple or list); ``names`` the columns (None for
    sequences written without a header); ``values(record)`` the record's
    values in that order, raising :class:`RecordShapeError` or ValueError for
    a record that does not have this shape. Their messages continue a
    sentence that starts with the record ("record 3 (1, 2) has 2 fields, ...").

    Example::

        >>> shape = RowShape.of(WrittenFile("a.csv", 3), None)
        >>> shape.names, shape.values(WrittenFile("b.csv", 4))
        (('path', 'rows'), ('b.csv', 4))
    """

    kind: str
    names: tuple[str, ...] | None
    values: Callable[[Any], Sequence[Any]]

    @classmethod
    def of(cls, first: Any, columns: Sequence[str] | None) -> RowShape:
        """The shape of ``first``; ``columns`` picks and orders the fields (names the values of a sequence)."""
        names = tuple(columns) if columns is not None else None
        if isinstance(first, dict):
            names = names if names is not None else tuple(first)
            return cls("dict", names, _dict_values(names))
        if is_record_object(first):
            return cls._of_object(first, names)
        if isinstance(first, (tuple, list)):
            return cls("sequence", names, _sequence_values(len(names) if names is not None else len(first)))
        raise RecordShapeError(f"is a {type(first).__name__}; the records must be {ACCEPTED_RECORDS}")

    @classmethod
    def _of_object(cls, first: Any, names: tuple[str, ...] | None) -> RowShape:
        record_type = type(first)
        own = field_names(first)
        if names is None:
            names = own
        missing = [n for n in names if n not in own]
        if missing:
            raise RecordShapeError(f"has no fields {missing} (a {record_type.__name__}: {list(own)})")
        kind = "named tuple" if _is_named_tuple(first) else "dataclass"
        return cls(kind, names, _object_values(record_type, kind, names, whole=names == own))

    def as_dict(self, record: Any) -> dict[str, Any]:
        """The record as a dict of its columns, in their order."""
        return dict(zip(self.names or (), self.values(record)))


def _dict_values(names: tuple[str, ...]) -> Callable[[Any], Sequence[Any]]:
    name_set = frozenset(names)

    def values(record: Any) -> Sequence[Any]:
        if not isinstance(record, dict):
            raise RecordShapeError(f"is a {type(record).__name__}, but this file holds dict records")
        if record.keys() != name_set:
            extra = sorted(map(str, record.keys() - name_set))
            if extra:
                raise ValueError(f"has fields {extra} not in the columns {list(names)}")
        return [record.get(n) for n in names]
    return values


def _object_values(record_type: type, kind: str, names: tuple[str, ...],
                   whole: bool) -> Callable[[Any], Sequence[Any]]:
    # A named tuple holding exactly the columns is its own row: no copy per record.
    get = (lambda r: r) if whole and kind == "named tuple" else _getter(names)

    def values(record: Any) -> Sequence[Any]:
        if type(record) is not record_type and not isinstance(record, record_type):
            raise RecordShapeError(f"is a {type(record).__name__}, but this file holds {record_type.__name__} records")
        return get(record)
    return values


def _getter(names: tuple[str, ...]) -> Callable[[Any], Sequence[Any]]:
    if not names:
        return lambda r: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda r: (one(r),)
    return attrgetter(*names)


def _sequence_values(width: int) -> Callable[[Any], Sequence[Any]]:
    def values(record: Any) -> Sequence[Any]:
        if not isinstance(record, (tuple, list)):
            raise RecordShapeError(f"is a {type(record).__name__}, but this file holds tuple or list records")
        if len(record) != width:
            raise ValueError(f"has {len(record)} fields, expected {width}")
        return record
    return values
