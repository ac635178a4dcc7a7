"""Line-oriented file sources: :class:`TextLines` (one str per line) and :class:`FromJSONL` (one dict per line).

Each source opens its file in ``open(ctx)`` and closes it in ``close()``; the
runtime pulls batches with ``next_batch(max_items)``. :class:`FromJSONL` sends
malformed lines through its error policy
(:class:`~elastream.ops.records.RecordSource`); line numbers are 1-based
physical lines of the file.

Threading: a source runs in one worker at a time, though not always the same
worker, so the open file is used by one thread at a time only.
"""

from __future__ import annotations

import codecs
import json
import os
from itertools import islice
from typing import TYPE_CHECKING, Any

from elastream.errors import RecordError
from elastream.operators.base import SourceOperator
from elastream.ops.records import ErrorPolicy, RecordSource
from elastream.ops.text_decoding import raw_bytes, reading_encoding, undecodable_reason

if TYPE_CHECKING:  # pragma: no cover
    from elastream.operators.context_api import OperatorContext

__all__ = ["FromJSONL", "TextLines"]


class TextLines(SourceOperator):
    """Emit each line of a text file as a ``str``, newline stripped, in order.

    A line that cannot be decoded with ``encoding`` raises
    :class:`~elastream.errors.RecordError` naming the file and line.

    Example::

        flow.add(es.ops.TextLines("access.log"), name="lines")
    """

    def __init__(self, path: str | os.PathLike[str], encoding: str = "utf-8"):
        super().__init__(outputs=1)
        self.path = os.fspath(path)
        self.encoding = encoding
        codecs.lookup(encoding)  # fail at build time on an unknown encoding
        self._file: Any = None
        self._line = 0

    def open(self, ctx: OperatorContext) -> None:
        self._line = 0
        self._file = open(self.path, encoding=reading_encoding(self.encoding), errors="surrogateescape")

    def next_batch(self, max_items: int) -> list[str] | None:
        lines = list(islice(self._file, max_items))
        if not lines:
            return None
        first = self._line + 1
        self._line += len(lines)
        # One check for the whole batch; the per-line search runs only on failure.
        if not "".join(lines).isascii():
            for i, line in enumerate(lines):
                reason = undecodable_reason(line, self.encoding)
                if reason is not None:
                    raise RecordError(self.path, first + i, reason)
        return [line[:-1] if line.endswith("\n") else line for line in lines]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def describe(self) -> str:
        return f"TextLines({self.path!r})"


_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                    type(None): "null"}


class FromJSONL(RecordSource):
    """Emit each line of a JSON-lines file as a dict, in order.

    A line is malformed when it is not valid JSON (or not UTF-8) or is valid
    JSON but not an object; ``on_error`` says what then happens. Blank lines
    are skipped silently.

    Example::

        src = flow.add(es.ops.FromJSONL("events.jsonl", on_error="dead_letter"), name="events")
        flow.connect(src.out(1), flow.add(es.ops.ToJSONL("rejected.jsonl")).in_(0))
    """

    def __init__(self, path: str | os.PathLike[str], *, on_error: str | ErrorPolicy = "fail"):
        super().__init__(path, on_error)
        self._file: Any = None
        self._line = 0

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        self._line = 0
        # Binary lines, decoded one by one: an undecodable byte then belongs to
        # exactly one line instead of failing a whole 8 KiB text chunk.
        self._file = open(self.path, "rb")

    def _read(self, out: list, max_items: int) -> None:
        lines = list(islice(self._file, max_items))
        loads = json.loads
        for line in lines:
            self._line += 1
            if line.isspace():
                continue
            try:
                # Decode here rather than in json.loads, which guesses UTF-16/32
                # from the first bytes; JSON lines are UTF-8 (a BOM is tolerated).
                text = line.decode("utf-8-sig" if self._line == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                self._reject(self._line, f"not valid UTF-8: {exc.reason} at byte {exc.start + 1}",
                             raw_bytes(line))
                continue
            try:
                value = loads(text)
            except json.JSONDecodeError as exc:
                self._reject(self._line, f"invalid JSON: {exc.msg} at column {exc.colno}", raw_bytes(line))
                continue
            except (ValueError, RecursionError) as exc:
                self._reject(self._line, f"invalid JSON: {exc}", raw_bytes(line))
                continue
            if type(value) is dict:
                out.append(value)
            else:
                kind = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
                self._reject(self._line, f"expected a JSON object, got {kind}", raw_bytes(line))
        if len(lines) < max_items:
            self._eof()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
