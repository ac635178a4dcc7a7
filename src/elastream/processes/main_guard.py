"""Is the run being started from the main script's top level without ``if __name__ == "__main__":``?

A worker process started with ``forkserver`` or ``spawn`` (every start method
elastream allows) first runs the parent's main script again, as the module
``__mp_main__``, so that objects defined there can be unpickled. A script whose
top level starts a multi-process run without the guard would start the run
again in every worker: Python stops that worker during its bootstrapping, and
before this check the parent could see nothing but a worker that died.

:func:`main_is_guarded` answers the question before any worker starts, from
the call stack and the main script's syntax tree: it finds the ``<module>``
frame of ``__main__`` on the stack and checks whether the top-level statement
executing there sits inside an ``if __name__ == "__main__":`` block.
:func:`check_main_guard` raises :class:`MainGuardError` (with
:data:`MAIN_GUARD_HINT`) when it does not; an elastic run that may stay in one
process calls :func:`main_is_guarded` and prints the hint instead.

Threading: pure functions of the caller's stack and the script's source; call
them from the thread that starts the run (another thread's stack does not show
the main script's frame, and then the answer is True).
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from types import FrameType

from elastream.errors import ElastreamError

#: One line saying how to allow worker processes when the main script has no guard.
MAIN_GUARD_HINT = ('worker processes re-run the main script, so start the run inside '
                   '`if __name__ == "__main__":` to use processes')

#: The name the main module has in a worker while it is re-run there.
WORKER_MAIN_NAME = "__mp_main__"


class MainGuardError(ElastreamError):
    """A multi-process run was started at the main script's top level without ``if __name__ == "__main__":``.

    ``path`` and ``line`` say where the run was started.
    """

    def __init__(self, path: str, line: int):
        super().__init__(
            f"a multi-process run was started at the top level of {path} (line {line}) without "
            f'`if __name__ == "__main__":`; each worker process re-runs the main script (as "{WORKER_MAIN_NAME}") '
            f"and would start the run again. Fix: put the code that runs the flow under "
            f'`if __name__ == "__main__":` (or run it with processes=1).')
        self.path = path
        self.line = line
        self.hint = MAIN_GUARD_HINT


def main_is_guarded() -> bool:
    """True unless the caller runs, through the main script's top level, outside ``if __name__ == "__main__":``.

    True as well when workers do not re-run the main module (``python -c``, an interactive
    session, a notebook, a package's ``__main__`` run with ``python -m pkg``), when its top-level
    frame is not on this thread's stack, or when its source cannot be read or parsed (nothing to
    go by: the run is not refused on a guess).

    Example: a script whose last line is ``es.Runner(processes=2).run(flow)`` sees False;
    the same line under ``if __name__ == "__main__":`` sees True.
    """
    return unguarded_call_site() is None


def check_main_guard() -> None:
    """Raise :class:`MainGuardError` when :func:`main_is_guarded` is False (call it before any worker starts)."""
    site = unguarded_call_site()
    if site is not None:
        raise MainGuardError(*site)


def reimports_main(start_method: str) -> bool:
    """True for the start methods whose workers re-run the main script (all but ``fork``)."""
    return start_method != "fork"


def unguarded_call_site() -> tuple[str, int] | None:
    """(main script path, line) of the unguarded top-level statement the caller runs under, or None."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not _is_rerun_by_workers(main):
        return None
    frame = _main_module_frame(vars(main))
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        stat = os.stat(path)
        guarded = _guarded_lines(path, stat.st_mtime_ns, stat.st_size)
    except (OSError, SyntaxError, ValueError):
        return None
    return None if any(first <= line <= last for first, last in guarded) else (path, line)


def _is_rerun_by_workers(main: object) -> bool:
    """Whether a worker re-runs this main module: ``python -m pkg`` (a package's ``__main__``) is not re-run."""
    name = getattr(getattr(main, "__spec__", None), "name", None)
    return name is None or not (name == "__main__" or name.endswith(".__main__"))


def _main_module_frame(main_globals: dict) -> FrameType | None:
    """The outermost frame of this thread that executes the main module's top level, if any."""
    found = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main_globals:
            found = frame
        frame = frame.f_back
    return found


@functools.lru_cache(maxsize=8)
def _guarded_lines(path: str, mtime_ns: int, size: int) -> tuple[tuple[int, int], ...]:
    """Line ranges of the blocks only ``__main__`` runs in the script at ``path`` (cached per version)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    return tuple(_guarded_blocks(tree.body))


def _guarded_blocks(body: list[ast.stmt]) -> list[tuple[int, int]]:
    """Ranges of the statements in ``body`` (and the top-level blocks nested in it) under a main guard."""
    ranges: list[tuple[int, int]] = []
    for stmt in body:
        branch = _main_branch(stmt) if isinstance(stmt, ast.If) else []
        if branch:
            ranges.append(_span(branch))
            continue
        for inner in _nested_bodies(stmt):
            ranges.extend(_guarded_blocks(inner))
    return ranges


def _nested_bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks the top level executes as it goes through ``stmt`` (try, with, if, for, match...).

    Not the bodies of functions and classes: a guard inside a function says nothing about the top level.
    """
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    bodies = [getattr(stmt, name) for name in ("body", "orelse", "finalbody")
              if isinstance(getattr(stmt, name, None), list)]
    bodies.extend(handler.body for handler in getattr(stmt, "handlers", ()))
    bodies.extend(case.body for case in getattr(stmt, "cases", ()))
    return bodies


def _main_branch(stmt: ast.If) -> list[ast.stmt]:
    """The branch of ``stmt`` that runs only when ``__name__ == "__main__"`` (empty if it is no main guard)."""
    test = stmt.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and len(test.comparators) == 1):
        return []
    sides = {_name_or_text(test.left), _name_or_text(test.comparators[0])}
    if sides != {"__name__", "'__main__'"}:
        return []
    if isinstance(test.ops[0], ast.Eq):
        return stmt.body
    return stmt.orelse if isinstance(test.ops[0], ast.NotEq) else []


def _name_or_text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    return None


def _span(stmts: list[ast.stmt]) -> tuple[int, int]:
    return stmts[0].lineno, max(s.end_lineno or s.lineno for s in stmts)
