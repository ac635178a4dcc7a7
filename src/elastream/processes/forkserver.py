"""The fork server: a long-lived helper that has imported the engine once, so workers start warm.

``ProcessConfig(start_method="forkserver")`` (the default) forks every worker
from one server process per interpreter instead of starting a fresh
interpreter (~0.3 s of imports) for each. The parent chooses what the server
imports when it starts it (:data:`FORKSERVER_PRELOAD`, plus the standard
library's and elastream's modules the first run's workers need:
:func:`preloadable_modules`) and what it only compiles (the flow's own modules,
:func:`precompilable_sources`, executed by each worker itself). In the server,
:func:`set_up_fork_server` (called when :mod:`elastream.processes.child` is
imported there) adopts the parent's ``sys.path`` and compiles those sources.

The server is the one child of the parent that outlives a run, on purpose: it
is stopped when the interpreter exits (``atexit``) or by
:func:`stop_fork_server`; the next run starts a new one.

A worker that dies while it starts (before elastream's code runs in it: re-running
the main script failed, say) leaves its error in a folder the parent made
(:func:`record_startup_errors`), which the parent reads back for the
``WorkerProcessError`` (:func:`startup_error`).

Threading: :func:`ensure_fork_server` and :func:`stop_fork_server` are called from
the thread that starts a run (or the user's); multiprocessing's own lock
serialises the server's start and stop.
"""

from __future__ import annotations

import atexit
import json
import os
import pickletools
import shutil
import sys
import tempfile
import threading
import traceback
import weakref
from types import ModuleType
from typing import Any

#: Environment variable with the parent's ``sys.path`` and the sources to compile (JSON) while it
#: starts a fork server (see :func:`set_up_fork_server`).
FORKSERVER_SETUP_ENV = "ELASTREAM_FORKSERVER_SETUP"

#: Modules the fork server imports before forking workers (``start_method="forkserver"``);
#: ``elastream.processes.child`` warms up the rest (see :func:`~elastream.processes.child.warm_up`).
#: The standard library's own part of a worker's start is in it too: running the main script again
#: (runpy, pkgutil) and unpickling the process object (popen_forkserver): ~1.5 ms a worker.
#: The engine (``start_threads``) is imported lazily by the child: left out, every worker compiled it
#: again before its first tuple (28-36 ms on the 2-vCPU VM, where no ``.pyc`` is written).
FORKSERVER_PRELOAD = ("elastream", "elastream.processes.child", "elastream.processes.spec",
                      "elastream.runtime.engine", "elastream.processes.proxies", "elastream.ordered.split_merge",
                      "cloudpickle", "runpy", "pkgutil", "multiprocessing.popen_forkserver")
#: A worker's spec larger than this is not scanned for modules to preload (the scan runs in Python).
PRELOAD_SCAN_BYTES = 1 << 20
#: Most lines of a worker's start-up error the parent keeps for its WorkerProcessError.
STARTUP_ERROR_LINES = 12

#: Name prefix of those folders (followed by the creating process's pid and "-").
STARTUP_DIR_PREFIX = "elastream-startup-"
#: Folder where workers forked from this process's fork server leave an error that killed them while
#: they started (None: no fork server started by this process yet).
_startup_errors_dir: str | None = None

#: Runs whose workers were forked from the server and have not ended (it must not stop under them).
_users: weakref.WeakSet[Any] = weakref.WeakSet()
_users_lock = threading.Lock()


# -- parent side ------------------------------------------------------------------------------
def fork_server_pid() -> int | None:
    """Process id of this process's fork server, or None when none runs."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def fork_server_running() -> bool:
    """True once this process's fork server runs (then a new preload list has no effect)."""
    return fork_server_pid() is not None


def ensure_fork_server(ctx: Any, payloads: list[bytes]) -> None:
    """Start the fork server unless it runs, preloading what the workers of ``payloads`` need.

    The fork server imports the engine once; every later worker forks from it warm (~10 ms
    instead of a fresh interpreter's ~0.3 s of imports). It is told only when it starts, so
    what this flow's workers import is added then: a later run of the same code forks with it
    already imported (no .pyc is written on the VM: each import compiles).
    """
    if fork_server_running():
        return
    wanted = worker_modules(payloads)
    preload = list(dict.fromkeys(FORKSERVER_PRELOAD + tuple(preloadable_modules(wanted))))
    start_fork_server(ctx, preload, precompilable_sources(wanted))


def start_fork_server(ctx: Any, preload: list[str], sources: list[str]) -> None:
    """Start the fork server with ``preload`` imported and ``sources`` compiled, on this process's ``sys.path``.

    Python 3.11's fork server drops the ``sys.path`` it is handed, so a module found only
    through an entry the main script added (a benchmark's own directory) would not import
    there; :func:`set_up_fork_server` takes the path and the files to compile from
    :data:`FORKSERVER_SETUP_ENV`, set only while the server starts.
    """
    from multiprocessing import forkserver

    global _startup_errors_dir
    if _startup_errors_dir is None:
        _remove_orphaned_startup_dirs()
        _startup_errors_dir = tempfile.mkdtemp(prefix=f"{STARTUP_DIR_PREFIX}{os.getpid()}-")
    ctx.set_forkserver_preload(preload)
    os.environ[FORKSERVER_SETUP_ENV] = json.dumps({"sys_path": sys.path, "compile": sources,
                                                   "startup_errors": _startup_errors_dir})
    try:
        forkserver.ensure_running()
    finally:
        os.environ.pop(FORKSERVER_SETUP_ENV, None)


def startup_error(pid: int | None) -> str:
    """The last lines of the error that killed worker ``pid`` while it started ("" if it left none).

    Only workers forked from the fork server leave one (:func:`record_startup_errors`); the file is
    removed once read.
    """
    if _startup_errors_dir is None or pid is None:
        return ""
    path = os.path.join(_startup_errors_dir, f"{pid}.err")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        os.unlink(path)
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-STARTUP_ERROR_LINES:])


def use_fork_server(run: Any) -> None:
    """Record that ``run``'s workers come from the fork server until :func:`release_fork_server`."""
    with _users_lock:
        _users.add(run)


def release_fork_server(run: Any) -> None:
    """``run``'s workers have all been joined."""
    with _users_lock:
        _users.discard(run)


def stop_fork_server() -> bool:
    """Stop this process's fork server, if one runs; return True if one was stopped.

    It is joined (no zombie is left). The next run with ``start_method="forkserver"``
    starts a new one. Raises RuntimeError while a run's workers still come from it
    (they would lose their parent). Also called when the interpreter exits.

    Example::

        es.Runner(processes=2).run(flow)
        elastream.processes.stop_fork_server()   # True: no helper process is left
    """
    from multiprocessing import forkserver

    with _users_lock:
        if len(_users):
            raise RuntimeError(f"{len(_users)} multi-process run(s) still use the fork server: wait for them first")
    if not fork_server_running():
        return False
    forkserver._forkserver._stop()  # closes its "alive" pipe (it exits at EOF) and waits for it
    _remove_startup_errors_dir()
    return True


def _remove_startup_errors_dir() -> None:
    global _startup_errors_dir
    if _startup_errors_dir is not None:
        shutil.rmtree(_startup_errors_dir, ignore_errors=True)
        _startup_errors_dir = None


def _remove_orphaned_startup_dirs() -> None:
    """Remove the start-up error folders of processes that no longer exist (killed before their atexit ran)."""
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(STARTUP_DIR_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(STARTUP_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: it exists
    return True


def _stop_at_exit() -> None:
    try:
        stop_fork_server()
    except (RuntimeError, OSError):
        pass  # runs still going at exit: the server ends when this process's end closes its pipe
    finally:
        _remove_startup_errors_dir()


atexit.register(_stop_at_exit)


# -- what the workers need --------------------------------------------------------------------
def worker_modules(payloads: list[bytes]) -> set[str]:
    """Modules a worker imports at its start, of those this process has imported.

    That is what the main script imports (a worker runs the parent's main script again, as
    ``__mp_main__``, before anything else; the fork server's own ``"__main__"`` preload never
    gets the script's path on Python 3.11) and what the pickles in ``payloads`` name
    (unpickling a worker's spec imports them): ~5-15 ms a worker when that is argparse or
    the flow's own module (no ``.pyc`` is written on the VM: each import compiles).
    """
    names = _main_script_modules()
    for payload in payloads:
        if len(payload) <= PRELOAD_SCAN_BYTES:
            names.update(_pickled_modules(payload))
    return {n for n in names if n in sys.modules and getattr(sys.modules[n], "__spec__", None) is not None}


def preloadable_modules(names: set[str]) -> list[str]:
    """Those of ``names`` the fork server may import for the workers: the standard library's and elastream's.

    A module imported once in the server is inherited by every worker, so one that seeds a
    random generator or opens a connection at import would hand all of them the same one,
    where each used to import its own; the others are only compiled there
    (:func:`precompilable_sources`). Only modules this process has imported are named: the
    fork server dies on an import that raises anything but ImportError.

    Example: ``preloadable_modules(worker_modules([cloudpickle.dumps(es.ops.Collect())])) == ["elastream.ops.sinks"]``
    """
    return sorted(n for n in names if _is_shared_safely(n))


def precompilable_sources(names: set[str]) -> list[str]:
    """Source files of the rest of ``names``: compiled in the fork server, executed by each worker itself."""
    sources = []
    for name in sorted(names):
        path = getattr(sys.modules[name], "__file__", None)
        if not _is_shared_safely(name) and isinstance(path, str) and path.endswith(".py"):
            sources.append(path)
    return sources


def _is_shared_safely(name: str) -> bool:
    """Modules whose import-time state every worker may inherit from the fork server: elastream's, the stdlib's."""
    top = name.split(".", 1)[0]
    return top == "elastream" or (top in sys.stdlib_module_names and not top.startswith("_") and top != "builtins")


def _main_script_modules() -> set[str]:
    """Modules the main script's names refer to: modules it imported, and where its imported objects live."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None:
        return set()  # python -c, -m, an interactive session: workers do not re-run a script
    names = set()
    for value in list(vars(main).values()):
        try:
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        except Exception:  # noqa: BLE001 - an object with an odd __getattr__: no hint from it
            continue
        if isinstance(name, str):
            names.add(name)
    return names


def _pickled_modules(payload: bytes) -> set[str]:
    """Module names of the globals a pickle refers to (GLOBAL, and STACK_GLOBAL after two strings)."""
    names: set[str] = set()
    memo: dict[int, Any] = {}
    last: list[Any] = [None, None]  # the two latest values pushed (strings matter)
    try:
        for op, arg, _ in pickletools.genops(payload):
            code = op.name
            if code == "GLOBAL":
                names.add(str(arg).split(" ", 1)[0])
            elif code == "STACK_GLOBAL":
                if isinstance(last[0], str):
                    names.add(last[0])
            elif code == "MEMOIZE":
                memo[len(memo)] = last[1]
                continue
            elif code in ("FRAME", "PROTO"):
                continue
            elif code in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = last[1]
                continue
            value = (memo.get(int(arg)) if code in ("BINGET", "LONG_BINGET", "GET")
                     else arg if isinstance(arg, str) and "UNICODE" in code else None)
            last = [last[1], value]
    except Exception:  # noqa: BLE001 - only a hint for the fork server
        pass
    return names


# -- fork server side -------------------------------------------------------------------------
def set_up_fork_server() -> None:
    """In a fork server being started: adopt the parent's ``sys.path``, compile the sources it names.

    The path goes first (Python 3.11's fork server drops the one it is handed). The sources
    are the workers' own modules that must not be imported here (their import-time state
    would be shared by every worker): they are only compiled, and a worker importing one of
    them gets the code object when its source is byte for byte the same
    (:class:`CompiledSources`), so it executes the module itself without compiling it
    (~4 ms for a 16 KB module on the VM, where no ``.pyc`` is written). The variable is
    removed at once, so the workers do not carry it on.
    """
    raw = os.environ.pop(FORKSERVER_SETUP_ENV, None)
    if not raw:
        return
    setup = json.loads(raw)
    parent = [p for p in setup.get("sys_path", []) if isinstance(p, str)]
    sys.path[:] = parent + [p for p in sys.path if p not in parent]
    if isinstance(setup.get("startup_errors"), str):
        record_startup_errors(setup["startup_errors"])
    sources = CompiledSources.install()
    for path in setup.get("compile", []):
        sources.add(path)


def record_startup_errors(directory: str) -> None:
    """In the fork server: make a worker that dies while it starts leave its error in ``directory``.

    Such an error (re-running the main script fails, say) reaches ``sys.excepthook`` in the
    forked worker before any of elastream's code runs there; the hook installed here writes it
    to ``<directory>/<pid>.err`` as well as to stderr, for :func:`startup_error` in the parent.
    """
    previous = sys.excepthook

    def hook(kind: Any, value: Any, tb: Any) -> None:
        try:
            with open(os.path.join(directory, f"{os.getpid()}.err"), "w", encoding="utf-8") as f:
                f.write("".join(traceback.format_exception(kind, value, tb)))
        except OSError:
            pass  # the parent still reports the exit code
        previous(kind, value, tb)

    sys.excepthook = hook


class CompiledSources:
    """Code objects compiled ahead, handed to ``SourceFileLoader`` for an identical source at the same path.

    Installed in a fork server only (the workers inherit it): ``source_to_code`` of
    ``importlib.machinery.SourceFileLoader`` looks here first; anything else compiles as usual.
    """

    _installed: CompiledSources | None = None

    def __init__(self) -> None:
        self.code: dict[str, tuple[bytes, Any]] = {}

    @classmethod
    def install(cls) -> CompiledSources:
        if cls._installed is None:
            from importlib.machinery import SourceFileLoader

            sources = cls()
            original = SourceFileLoader.source_to_code

            def source_to_code(loader: Any, data: Any, path: Any, *, _optimize: int = -1) -> Any:
                hit = sources.code.get(path) if _optimize == -1 else None
                if hit is not None and hit[0] == data:
                    return hit[1]
                return original(loader, data, path, _optimize=_optimize)

            SourceFileLoader.source_to_code = source_to_code  # type: ignore[method-assign]
            cls._installed = sources
        return cls._installed

    def add(self, path: str) -> None:
        """Compile ``path`` now, as the import system would (nothing if it cannot be read or compiled)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
            self.code[path] = (data, compile(data, path, "exec", dont_inherit=True))
        except (OSError, SyntaxError, ValueError):
            pass
