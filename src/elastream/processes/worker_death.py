"""How a worker process that died is reported: :class:`WorkerProcessError`, with what it printed while starting.

A worker that ends without reporting its end (``Done`` or ``Failed``) has died: killed, crashed,
or stopped while it started (re-running the main script, unpickling its part). The supervisor
turns that into one :class:`WorkerProcessError` (:func:`death_of`), which fails the run: a run
never returns normally without a part's outputs.

Threading: called from the supervisor thread once the worker has been reaped.
"""

from __future__ import annotations

from typing import Any

from elastream.errors import ElastreamError
from elastream.processes import forkserver

__all__ = ["STARTUP_HINT", "WorkerProcessError", "death_of"]

#: What a worker that died while starting most likely needs (the error it printed comes before).
STARTUP_HINT = ("a worker process first re-runs the main script (as \"__mp_main__\"): code at its top level that "
                "fails there, or starts a run, kills the worker; put such code inside `if __name__ == \"__main__\":`")


class WorkerProcessError(ElastreamError):
    """A worker process died (killed, crashed) while the flow ran, or during its start-up.

    ``starting`` is True when it died before it had started its operators (its bootstrapping:
    re-running the main script, unpickling its part of the flow); ``stderr_tail`` is the end of
    what it printed then, where that could be captured (workers from the fork server).
    """

    def __init__(self, index: int, pid: int | None, exitcode: int | None, operators: list[str], *,
                 starting: bool = False, stderr_tail: str = ""):
        how = ("exit status not known" if exitcode is None else
               f"killed by signal {-exitcode}" if exitcode < 0 else f"exit code {exitcode}")
        when = " during its start-up, before its operators ran" if starting else ""
        message = f"worker process {index} (pid {pid}) died{when} ({how}); its operators: {', '.join(operators)}"
        if starting and (exitcode is None or exitcode >= 0):  # not killed by a signal: it failed on its own
            message += f"\n{STARTUP_HINT}"
        if stderr_tail:
            message += "\nits last lines on stderr:\n" + "\n".join(f"  {line}" for line in stderr_tail.splitlines())
        elif starting:
            message += "\n(its own error, if it printed one, is on stderr above)"
        super().__init__(message)
        self.index = index
        self.pid = pid
        self.exitcode = exitcode
        self.operators = operators
        self.starting = starting
        self.stderr_tail = stderr_tail


def death_of(index: int, reported_pid: int | None, process: Any, operators: list[str]) -> WorkerProcessError:
    """The error for worker ``index`` whose ``process`` has ended without reporting its end.

    ``reported_pid`` is the pid it sent when it started its operators (None: it never got that far,
    so it died while starting, and the error it left, if any, is included).
    """
    pid = reported_pid or process.pid
    return WorkerProcessError(index, pid, process.exitcode, operators, starting=reported_pid is None,
                              stderr_tail=forkserver.startup_error(pid))
