"""Ship the elastream package to Spark executors that do not have it installed.

On a cluster, Spark's Python workers run on other machines (or at least in
other interpreters) than the driver: the translated flow's functions unpickle
there and import ``elastream``. :func:`package_zip` builds a zip of the
package's pure-Python files (and its package data), named by a hash of their
content and cached in the temp folder, so the same sources give the same zip
and a changed source a new one. :func:`ship_package` adds it to a session with
``SparkContext.addPyFile``, which puts it on the Python path of every task the
session runs from then on.

Compiled extensions (``_splitfast``, ``_ringfast``, ``_rowsfast``, ``_untrack``)
are left out on purpose: Python cannot load them from a zip, and they were
built for the driver's platform. Every module that uses one falls back to its
pure-Python twin when the import fails (see :data:`COMPILED_WITH_FALLBACK`).

Threading: :func:`package_zip` may run in several processes at once (the zip
is written to a private file and renamed into place); :func:`ship_package` is
called by :func:`elastream.spark.session.get_session` under its lock.

Example::

    zip_path = package_zip()           # e.g. /tmp/elastream-pyfiles/elastream-0.1.0-3f2a9c1d0b4e7a65.zip
    ship_package(spark)                # no-op for local masters and Spark Connect sessions
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import elastream

#: Where zips are cached (one per content hash).
CACHE_FOLDER = "elastream-pyfiles"
#: Subpackages installed from outside the package's folder (pyproject's package-dir maps bench/ to elastream.bench).
MAPPED_SUBPACKAGES = ("bench",)
#: Files never shipped: compiled code (cannot load from a zip), C sources, bytecode caches.
EXCLUDED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".c", ".h", ".pyc", ".pyo")
EXCLUDED_FOLDERS = ("__pycache__", "results")
#: The compiled extensions and the module that falls back to pure Python when each is missing.
COMPILED_WITH_FALLBACK = {
    "elastream.ordered._splitfast": "elastream.ordered.routing",
    "elastream.ipc._ringfast": "elastream.ipc._ring_format",
    "elastream.ipc._rowsfast": "elastream.ipc.codec",
    "elastream.runtime._untrack": "elastream.operators.untrack",
}
#: Changes whenever the zip's layout does, so a zip cached by an older elastream is not reused.
_LAYOUT = b"elastream-pyfiles/2"
#: A fixed timestamp for every zip entry, so the zip's bytes depend on the content only.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` runs executors in the driver's own process (``local``, ``local[4]``, ``local[*, 2]``).

    ``local-cluster[...]`` starts separate executor processes, so it is not local here.

    Example: ``is_local_master("local[2]") and not is_local_master("spark://127.0.0.1:7077")``
    """
    return master is not None and (master == "local" or master.startswith("local["))


def package_files() -> list[tuple[str, Path]]:
    """Every file the zip holds, as (name inside the zip, file on disk), sorted by name."""
    files: dict[str, Path] = {}
    for root in elastream.__path__:
        files.update(_walk(Path(root), "elastream"))
    for name in MAPPED_SUBPACKAGES:
        spec = importlib.util.find_spec(f"elastream.{name}")
        for root in (spec.submodule_search_locations or []) if spec else []:
            files.update(_walk(Path(root), f"elastream/{name}"))
    return sorted(files.items())


def _walk(root: Path, prefix: str) -> Iterator[tuple[str, Path]]:
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED_FOLDERS and not d.startswith("."))
        for name in names:
            if name.endswith(EXCLUDED_SUFFIXES) or name.startswith("."):
                continue
            path = Path(folder) / name
            yield f"{prefix}/{path.relative_to(root).as_posix()}", path


def package_zip(folder: str | Path | None = None) -> Path:
    """The zip of the package's pure-Python files, built once per content (see the module docstring).

    ``folder`` defaults to ``<temp>/elastream-pyfiles``. The name carries the
    package version and a hash of every shipped file's name and bytes.

    Example: ``zipfile.ZipFile(package_zip()).read("elastream/__init__.py")``
    """
    files = [(name, path.read_bytes()) for name, path in package_files()]
    digest = hashlib.sha256(_LAYOUT)
    for name, data in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = Path(folder or Path(tempfile.gettempdir()) / CACHE_FOLDER)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"elastream-{elastream.__version__}-{digest.hexdigest()[:16]}.zip"
    if not path.exists():
        _write_zip(path, files)
    return path


def _write_zip(path: Path, files: list[tuple[str, bytes]]) -> None:
    """Write ``files`` to a private name and rename it into place (another process may be writing the same zip)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        # zipimport finds a package without __init__.py (elastream.spark is one) only by its folder's entry.
        for folder in _folders(name for name, _ in files):
            archive.writestr(zipfile.ZipInfo(folder, date_time=_ZIP_TIME), b"")
        for name, data in files:
            archive.writestr(zipfile.ZipInfo(name, date_time=_ZIP_TIME), data, compress_type=zipfile.ZIP_DEFLATED)
    partial.replace(path)


def _folders(names: Iterator[str]) -> list[str]:
    """Every folder above the given zip names, as zip folder entries (``a/``, ``a/b/``), sorted."""
    folders = set()
    for name in names:
        parts = name.split("/")[:-1]
        folders.update("/".join(parts[:i]) + "/" for i in range(1, len(parts) + 1))
    return sorted(folders)


def ship_package(session: Any) -> Path | None:
    """Add the package zip to ``session``'s tasks when its master is not local; return the zip shipped, or None.

    Local masters share the driver's files (their workers get its ``sys.path``);
    a Spark Connect session (no ``sparkContext``) is left alone: its server
    owns the executors. Adding the same zip twice is harmless (Spark keeps it once).
    """
    if type(session).__module__.startswith("pyspark.sql.connect"):
        return None
    context = session.sparkContext
    if is_local_master(str(context.master)):
        return None
    path = package_zip()
    if str(path) not in _shipped(context):
        context.addPyFile(str(path))
        _shipped(context).add(str(path))
    return path


def _shipped(context: Any) -> set[str]:
    """The zips already added to ``context`` (kept on it, so a new context starts empty)."""
    shipped = getattr(context, "_elastream_shipped", None)
    if shipped is None:
        shipped = set()
        context._elastream_shipped = shipped  # noqa: SLF001 - our own attribute on the context
    return shipped


# -- what executors must have installed ----------------------------------------------------------------------------

def pinned_ranges() -> dict[str, str]:
    """The version ranges elastream pins its dependencies to (``{"pyarrow": ">=14,<25", ...}``).

    Read from the installed package's metadata (which pyproject.toml's
    ``dependencies`` became), lower bounds first; empty when elastream runs
    from a source folder that was never installed.
    """
    try:
        requirements = importlib.metadata.requires("elastream") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    pins = {}
    for line in requirements:
        if ";" in line:
            continue  # an extra's or a platform's requirement, not a plain dependency
        match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(\[[^\]]*\])?\s*(.*)", line)
        if match and match.group(3):
            clauses = [c.strip() for c in match.group(3).split(",") if c.strip()]
            clauses.sort(key=lambda c: not c.startswith(">"))
            pins[match.group(1).lower()] = ",".join(clauses)
    return pins


def satisfies(version: str, ranges: str) -> bool:
    """Whether ``version`` lies in ``ranges`` (comma-separated ``>=``, ``>``, ``<=``, ``<``, ``==``, ``!=`` clauses).

    Versions compare by their leading numbers (``2.3.3``, ``24.0.0rc1`` as 24.0.0);
    clauses of other kinds are not checked.

    Example: ``satisfies("2.1.0", ">=3,<4") is False``
    """
    have = _numbers(version)
    tests = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
             "<": lambda a, b: a < b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
    for clause in ranges.split(","):
        match = re.match(r"\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9.]*)", clause)
        if match:
            want = _numbers(match.group(2))
            width = max(len(have), len(want))
            if not tests[match.group(1)](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
                return False
    return True


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", re.match(r"[\d.]*", version).group(0)))
