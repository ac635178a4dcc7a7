"""Consecutive Map members of a fused chain called as one generated list comprehension.

Made once when the chain opens (:mod:`elastream.runtime.fusion`), never per tuple: the same code
a hand-unrolled loop would be, plus what a failure needs to name the member that raised.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Sequence
from typing import Any

#: The record a composed member failed on could not be told.
NO_RECORD: Any = object()


class Composed:
    """Consecutive Map members called as one generated list comprehension (made once, when the chain opens).

    ``run(items, port)`` is ``[fk(...f1(f0(x))) for x in items]`` with each call on
    a line of its own, so the line a failure was raised from in the comprehension
    (``code``) tells which member raised (``member_of_line``).
    """

    __slots__ = ("run", "code", "member_of_line", "fns")

    def __init__(self, fns: Sequence[Callable[[Any], Any]], label: str):
        n = len(fns)
        names = [f"f{i}" for i in range(n)]
        head = [f"def make({', '.join(names)}):",
                f"    def run(items, port, {', '.join(f'{f}={f}' for f in names)}):",
                "        return ["]
        calls = [f"            {names[i]}(" for i in range(n - 1, 0, -1)] + ["            f0(x" + ")" * n]
        tail = ["            for x in items]", "    return run"]
        scope: dict[str, Any] = {}
        # Named inside the package, so error reports leave these frames out as they do the engine's own.
        filename = os.path.join(os.path.dirname(__file__), f"<fused {label}>")
        exec(compile("\n".join(head + calls + tail) + "\n", filename, "exec"), scope)  # noqa: S102
        self.fns = tuple(fns)
        self.run: Callable[[list, int], list] = scope["make"](*fns)
        self.code = next(c for c in self.run.__code__.co_consts if isinstance(c, types.CodeType))
        last_line = len(head) + 1                 # the outermost call: the last member's
        self.member_of_line = {last_line + (n - 1 - i): i for i in range(n)}

    def failure(self, exc: BaseException) -> tuple[int | None, Any]:
        """(member index within the run, the record it got) of an exception raised inside ``run``.

        The comprehension holds only the run's input record, so the members before
        the failing one are called once more on that one record to find what it got
        (``NO_RECORD`` if that fails in turn).
        """
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is not self.code:
            tb = tb.tb_next
        if tb is None:
            return None, NO_RECORD
        member = self.member_of_line.get(tb.tb_lineno)
        record = tb.tb_frame.f_locals.get("x", NO_RECORD)
        if member is None or record is NO_RECORD:
            return member, NO_RECORD
        try:
            for fn in self.fns[:member]:
                record = fn(record)
        except Exception:  # noqa: BLE001 - the member is known; only its record is not
            return member, NO_RECORD
        return member, record
