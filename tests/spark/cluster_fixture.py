"""The loopback Spark cluster of the cluster tests, and the executors' Python without elastream.

The cluster itself (a standalone master and workers on 127.0.0.1, stopped on
every exit path, no JVM left behind) is :mod:`elastream.spark.local_cluster`;
its names are re-exported here for the tests.

:func:`executor_python` makes the Python the executors run: a venv of the
driver's interpreter that sees the driver's installed packages but not the
elastream the driver imports (the editable install's path hook does not run
there), optionally hiding some packages, as on a cluster where elastream was
never installed.

Threading: use from one thread (the pytest main thread).
"""

from __future__ import annotations

import site
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from elastream.spark.local_cluster import PR_SET_PDEATHSIG, LocalCluster, alive_workers, cluster_env, \
    die_with_parent, free_port, group_is_empty, group_members, running_cluster, spark_home, stop_cluster

__all__ = ["PR_SET_PDEATHSIG", "LocalCluster", "alive_workers", "cluster_env", "die_with_parent", "executor_python",
           "free_port", "group_is_empty", "group_members", "running_cluster", "spark_home", "stop_cluster"]


def executor_python(folder: Path, *, hide: Iterable[str] = ()) -> Path:
    """A Python for the executors: the driver's interpreter with its packages but no elastream.

    A venv of the base interpreter whose site folder lists a folder of links
    to the driver's installed top-level packages, except those named in
    ``hide`` (import names; their ``*.dist-info`` go too). Returns its ``python``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    venv = folder / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, capture_output=True)
    visible = folder / "packages"
    visible.mkdir(exist_ok=True)
    hidden = {name.lower() for name in hide}
    for site_dir in site.getsitepackages():
        for entry in Path(site_dir).iterdir():
            top = entry.name.split("-")[0].split(".")[0].lower()
            if top in hidden or entry.suffix == ".pth" or (visible / entry.name).exists():
                continue  # .pth files are not read from a listed folder anyway; skip them for clarity
            (visible / entry.name).symlink_to(entry)
    site_packages = next(venv.glob("lib/python*/site-packages"))
    (site_packages / "driver-packages.pth").write_text(f"{visible}\n")
    return venv / "bin" / "python"
