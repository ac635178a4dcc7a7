"""Check, before a flow runs, that a cluster's executors can run elastream's Python code.

Local mode hides this: its Python workers run the driver's interpreter. On a
cluster each worker machine has its own Python; the package itself is shipped
with the job (:mod:`elastream.spark.shipping`), the rest must be installed
there. :func:`check_executors` runs one tiny job on the executors that reports
their Python version, the elastream they import (it must be the shipped zip's)
and the versions of the packages the streaming translation needs
(:data:`EXECUTOR_NEEDS`), then compares them with the driver and with the
project's pinned ranges. Any difference raises :class:`ExecutorEnvironmentError`
saying what to install where, e.g.::

    the Spark executors on spark://127.0.0.1:7077 cannot import pyarrow (needed by elastream's streaming
    translation): install it in the executors' Python (/usr/bin/python3 on each worker): pip install "pyarrow>=14,<25"

The answer is cached per Spark application, so the job runs once per session.
Local masters and Spark Connect sessions are not checked (nothing to ship, or
no executors of ours to reach).

Threading: :func:`check_executors` may be called from any thread; concurrent
first calls for one session run the job once (a lock serialises them).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import elastream
from elastream.errors import ElastreamError
from elastream.spark.shipping import is_local_master, pinned_ranges, satisfies, ship_package

#: Packages the streaming translation needs in the executors' Python (import name → why).
EXECUTOR_NEEDS: dict[str, str] = {
    "pyarrow": "needed by elastream's streaming translation",
    "pandas": "needed by elastream's streaming translation",
    "numpy": "needed by elastream's streaming translation",
    "cloudpickle": "needed by elastream's streaming translation",
    "psutil": "imported by the elastream package",
}
#: Imported on the executors after the packages: the translation's own modules, from the shipped zip.
TRANSLATION_MODULE = "elastream.spark.streaming"
#: Seconds the check job may wait for executors before it is cancelled.
CHECK_TIMEOUT_S = 180.0

_lock = threading.Lock()
_checked: dict[str, ExecutorReport] = {}  # Spark application id -> its executors' report


class ExecutorEnvironmentError(ElastreamError):
    """The executors' Python cannot run elastream's Spark translation; the message says what to install where.

    ``problems`` holds one line per problem found.
    """

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ExecutorPython:
    """What one executor's Python reported (see :func:`probe_executor`)."""

    executable: str
    python: tuple[int, int, int]
    elastream_version: str | None
    elastream_file: str | None
    elastream_error: str | None
    #: the third-party module whose absence made importing elastream fail (reported as missing, not as elastream's)
    elastream_missing: str | None = None
    #: import name → its version, or None when the import failed
    versions: Mapping[str, str | None] = field(default_factory=dict)
    #: import name → why the import failed
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecutorReport:
    """The executors' answers to the check job, one per distinct Python (executable and version)."""

    master: str
    pythons: tuple[ExecutorPython, ...]


def check_executors(spark: Any, *, needs: Mapping[str, str] | None = None,
                    timeout_s: float = CHECK_TIMEOUT_S) -> ExecutorReport | None:
    """Check that ``spark``'s executors can run the streaming translation; raise if they cannot.

    Ships the package first (:func:`~elastream.spark.shipping.ship_package`).
    Returns the report (cached per Spark application), or None for a local
    master or a Spark Connect session. ``needs`` replaces
    :data:`EXECUTOR_NEEDS` (import name → why it is needed): flows whose
    functions import more packages can name them too.

    Raises :class:`ExecutorEnvironmentError` listing every problem found.

    Example::

        spark = get_session("spark://127.0.0.1:7077")
        check_executors(spark)   # runs one small job the first time, then answers from the cache
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    context = spark.sparkContext
    master = str(context.master)
    if is_local_master(master):
        return None
    needs = dict(EXECUTOR_NEEDS if needs is None else needs)
    key = f"{context.applicationId}:{sorted(needs)}"
    with _lock:
        if key not in _checked:
            ship_package(spark)
            report = ExecutorReport(master, tuple(_run_probe(context, tuple(needs), timeout_s)))
            problems = report_problems(report, needs)
            if problems:
                raise ExecutorEnvironmentError(problems)
            _checked[key] = report
        return _checked[key]


# -- on the executors ----------------------------------------------------------------------------------------------

def _probe_function(needs: tuple[str, ...], translation: str) -> Callable[[Iterable[Any]], Iterator[dict]]:
    """The probe the check job runs, made here so that cloudpickle ships it by value.

    A function nested in another is pickled with its code, not as a reference
    to this module: the executors need not import elastream (perhaps they
    cannot) to run it. Its body therefore imports everything it uses itself.
    """

    def probe_executor(_: Iterable[Any]) -> Iterator[dict]:
        import importlib
        import sys

        report: dict[str, Any] = {"executable": sys.executable, "python": list(sys.version_info[:3]),
                                  "versions": {}, "errors": {}}
        for name in needs:
            try:
                module = importlib.import_module(name)
                report["versions"][name] = str(getattr(module, "__version__", "unknown"))
            except Exception as exc:  # noqa: BLE001 - any failure to import is what the check reports
                report["versions"][name] = None
                report["errors"][name] = f"{type(exc).__name__}: {exc}"
        try:
            package = importlib.import_module("elastream")
            report["elastream_version"] = getattr(package, "__version__", None)
            report["elastream_file"] = getattr(package, "__file__", None)
            importlib.import_module(translation)
            report["elastream_error"] = None
        except Exception as exc:  # noqa: BLE001 - reported, with the missing module's name where there is one
            missing = getattr(exc, "name", None)
            report.setdefault("elastream_version", None)
            report.setdefault("elastream_file", None)
            report["elastream_error"] = f"{type(exc).__name__}: {exc}"
            if missing and missing.split(".")[0] != "elastream":
                report["elastream_missing"] = missing.split(".")[0]
                report["errors"].setdefault(report["elastream_missing"], report["elastream_error"])
        yield report

    return probe_executor


def _run_probe(context: Any, needs: tuple[str, ...], timeout_s: float) -> list[ExecutorPython]:
    """Run the probe as one task per core the cluster offers; return each distinct answer."""
    slots = max(1, int(context.defaultParallelism))
    group = f"elastream-check-executors-{id(context)}"
    context.setJobGroup(group, "elastream: check the executors' Python", interruptOnCancel=True)
    timer = threading.Timer(timeout_s, context.cancelJobGroup, args=(group,))
    timer.daemon = True
    timer.start()
    try:
        answers = context.parallelize(range(slots), slots) \
            .mapPartitions(_probe_function(needs, TRANSLATION_MODULE)).collect()
    except Exception as exc:  # noqa: BLE001 - Py4J wraps every executor failure; say what it means
        raise ExecutorEnvironmentError([_job_failure(context, exc, timer.finished.is_set(), timeout_s)]) from exc
    finally:
        timer.cancel()
        context.setLocalProperty("spark.jobGroup.id", None)
    distinct = {}
    for answer in answers:
        python = ExecutorPython(answer["executable"], tuple(answer["python"]), answer.get("elastream_version"),
                                answer.get("elastream_file"), answer.get("elastream_error"),
                                answer.get("elastream_missing"), answer["versions"], answer["errors"])
        distinct.setdefault((python.executable, python.python), python)
    return list(distinct.values())


# -- what the answers mean -------------------------------------------------------------------------------------------

def report_problems(report: ExecutorReport, needs: Mapping[str, str]) -> list[str]:
    """One line per problem in ``report`` (empty when the executors are fine), each saying what to install where.

    Example: ``report_problems(report, EXECUTOR_NEEDS) == []`` on a healthy cluster.
    """
    pins = pinned_ranges()
    problems: list[str] = []
    for python in report.pythons:
        where = f"install it in the executors' Python ({python.executable} on each worker)"
        on = f"the Spark executors on {report.master}"
        problems += _python_problems(on, python)
        for name, why in needs.items():
            requirement = f"{name}{pins.get(name, '')}"
            version = python.versions.get(name)
            if name in python.errors or (version is None and name in python.versions):
                problems.append(f'{on} cannot import {name} ({why}): {where}: pip install "{requirement}"')
            elif version is not None and name in pins and not satisfies(version, pins[name]):
                problems.append(f"{on} have {name} {version}, but elastream needs {requirement}: "
                                f'{where}: pip install "{requirement}"')
        for name, error in python.errors.items():
            if name not in needs:  # found missing while importing the translation itself
                requirement = f"{name}{pins.get(name, '')}"
                problems.append(f"{on} cannot import {name} (needed by elastream's streaming translation; "
                                f'{error}): {where}: pip install "{requirement}"')
    return list(dict.fromkeys(problems))


def _python_problems(on: str, python: ExecutorPython) -> list[str]:
    """Python version and elastream package problems of one executor Python."""
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    theirs = f"{python.python[0]}.{python.python[1]}"
    problems = []
    if theirs != driver:
        problems.append(f"{on} run Python {theirs} ({python.executable}) and the driver runs Python {driver} "
                        f"({sys.executable}): Spark needs the same major.minor on both: point spark.pyspark.python "
                        f"(or PYSPARK_PYTHON) at a Python {driver} on each worker")
    if python.elastream_missing is not None:
        pass  # reported as that package missing
    elif python.elastream_version is None or ".zip" not in (python.elastream_file or ""):
        found = f"elastream {python.elastream_version} from {python.elastream_file}" \
            if python.elastream_file else "no elastream"
        problems.append(f"{on} import {found} instead of the package shipped with the job "
                        f"({python.elastream_error or 'not the shipped zip'}): remove other elastream installations "
                        f"from the executors' Python ({python.executable}) or check spark.submit.pyFiles")
    elif python.elastream_version != elastream.__version__:
        problems.append(f"{on} import elastream {python.elastream_version} and the driver runs elastream "
                        f"{elastream.__version__}: remove the other version from the executors' Python "
                        f"({python.executable})")
    return problems


def _job_failure(context: Any, error: BaseException, timed_out: bool, timeout_s: float) -> str:
    """What a failed check job means, in one line."""
    on = f"the Spark executors on {context.master}"
    exe = _python_exec(context)
    text = str(error)
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    mismatch = re.search(r"different version:? \(?([\d., ]+)\)? than that in driver", text)
    if mismatch:
        theirs = ".".join(re.findall(r"\d+", mismatch.group(1))[:2])
        return (f"{on} run Python {theirs} ({exe}) and the driver runs Python {driver} ({sys.executable}): "
                f"Spark needs the same major.minor on both: point spark.pyspark.python (or PYSPARK_PYTHON) at a "
                f"Python {driver} on each worker")
    if re.search(r"Cannot run program|No such file or directory", text):
        return (f"{on} cannot start their Python ({exe}): install Python {driver} on each worker, or point "
                f"spark.pyspark.python (or PYSPARK_PYTHON) at the Python {driver} they have")
    if timed_out:
        return (f"{on} did not run elastream's check job within {timeout_s:.0f} s: does the cluster have a live "
                f"worker with free cores and memory for this application?")
    last = [line for line in text.splitlines() if line.strip()][-1:] or [type(error).__name__]
    return f"{on} failed elastream's check job: {last[0].strip()}"


def _python_exec(context: Any) -> str:
    """The Python the executors are told to run (``spark.pyspark.python``, ``PYSPARK_PYTHON`` or ``python3``)."""
    return str(getattr(context, "pythonExec", None) or "python3")


def forget_checks() -> None:
    """Drop the cached answers (tests; a cluster whose workers were reinstalled)."""
    with _lock:
        _checked.clear()
