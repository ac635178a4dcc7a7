"""Decoding helpers shared by the text file sources: encodings, undecodable bytes, raw record text.

Text files are read with ``errors="surrogateescape"`` so that a bad byte is
found on its exact line (:func:`undecodable_reason`) and shown as a ``\\xNN``
escape in a dead letter's raw text (:func:`printable`).

Threading: pure functions, safe from any thread.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["UNDECODABLE", "printable", "raw_bytes", "reading_encoding", "strip_newline", "undecodable_reason"]

# Files are decoded with errors="surrogateescape": an undecodable byte becomes a
# lone surrogate U+DC80..U+DCFF, which a strict decoder never produces, so one
# search finds the exact line of a decoding error (a strict text file would
# only fail somewhere in an 8 KiB chunk, without a usable line number).
UNDECODABLE = re.compile("[\udc80-\udcff]")


def reading_encoding(encoding: str) -> str:
    """The codec to open a file of ``encoding`` with: ``"utf-8-sig"`` for UTF-8, else ``encoding``.

    UTF-8 files written by spreadsheets often start with a BOM; "utf-8-sig"
    drops it when present and otherwise decodes exactly like "utf-8".

    Example::

        >>> reading_encoding("UTF8"), reading_encoding("latin-1")
        ('utf-8-sig', 'latin-1')
    """
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def undecodable_reason(line: str, encoding: str) -> str | None:
    """Why ``line`` (decoded with surrogateescape) is not valid text, or None.

    Example::

        >>> undecodable_reason(b"caf\\xe9".decode("utf-8", "surrogateescape"), "utf-8")
        'not valid utf-8 text: byte 0xe9 at column 4'
    """
    if line.isascii():
        return None
    m = UNDECODABLE.search(line)
    if m is None:
        return None
    byte = ord(m.group()) - 0xDC00
    return f"not valid {encoding} text: byte 0x{byte:02x} at column {m.start() + 1}"


def printable(text: str) -> str:
    """``text`` with undecodable bytes shown as ``\\xNN`` escapes.

    Example::

        >>> printable(b"caf\\xe9".decode("utf-8", "surrogateescape"))
        'caf\\\\xe9'
    """
    return UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def strip_newline(line: str) -> str:
    """``line`` without its final ``\\n``, ``\\r\\n`` or ``\\r``.

    Example::

        >>> strip_newline("a,b\\r\\n"), strip_newline("a,b")
        ('a,b', 'a,b')
    """
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def raw_bytes(line: bytes) -> str:
    """A line of bytes as text for a dead letter: UTF-8, bad bytes as ``\\xNN``, no final newline.

    Example::

        >>> raw_bytes(b'{"a": \\xff}\\n')
        '{"a": \\\\xff}'
    """
    return strip_newline(line.decode("utf-8", "backslashreplace"))
