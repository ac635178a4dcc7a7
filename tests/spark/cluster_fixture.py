"""A real Spark standalone cluster on loopback for the cluster tests: one master, one worker, always stopped.

:func:`running_cluster` starts the master and the worker with the launcher
classes the installed pyspark ships (``bin/spark-class``), every address bound
to 127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``) on free ports, waits until the
worker has registered with the master (the master's ``/json`` page), and stops
both on every way out of the ``with`` block. Each JVM is the leader of its own
process group, so stopping the group also stops the executor JVMs the worker
launched; each is also told by the kernel to die with the thread that started
it (``PR_SET_PDEATHSIG``), so a killed test process leaves no JVM behind.

:func:`executor_python` makes the Python the executors run: a venv of the
driver's interpreter that sees the driver's installed packages but not the
elastream the driver imports (the editable install's path hook does not run
there), optionally hiding some packages, as on a cluster where elastream was
never installed.

Threading: use from one thread (the pytest main thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import site
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1


@dataclass
class LocalCluster:
    """A running standalone master and worker (see :func:`running_cluster`)."""

    master_url: str
    web_url: str
    folder: Path
    processes: list[subprocess.Popen] = field(default_factory=list)
    #: every JVM's pid (each leads its process group), kept after the cluster stops
    pids: list[int] = field(default_factory=list)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the master's and the worker's logs (for failure messages)."""
        out = []
        for name in ("master.log", "worker.log"):
            path = self.folder / name
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            out.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(out)


def spark_home() -> Path:
    """The installed pyspark's folder, which holds ``bin/spark-class`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster_env(folder: Path) -> dict[str, str]:
    """The environment of the cluster's JVMs: loopback only, no user Spark configuration, no REST server."""
    conf = folder / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false", SPARK_LOG_DIR=str(folder))
    return env


@contextlib.contextmanager
def running_cluster(folder: Path, *, cores: int = 1, memory: str = "1g",
                    timeout_s: float = 90.0) -> Iterator[LocalCluster]:
    """A standalone master and one worker on 127.0.0.1, stopped (with their executors) when the block exits."""
    folder.mkdir(parents=True, exist_ok=True)
    port, web_port, worker_web_port = free_port(), free_port(), free_port()
    cluster = LocalCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", folder)
    env = cluster_env(folder)
    try:
        _start(cluster, _launch(folder / "master.log", env, "org.apache.spark.deploy.master.Master",
                                "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)))
        _start(cluster, _launch(folder / "worker.log", env, "org.apache.spark.deploy.worker.Worker",
                                cluster.master_url, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                "--webui-port", str(worker_web_port), "--work-dir", str(folder / "work")))
        _wait_for_worker(cluster, timeout_s)
        yield cluster
    finally:
        stop_cluster(cluster)


def _start(cluster: LocalCluster, process: subprocess.Popen) -> None:
    cluster.processes.append(process)
    cluster.pids.append(process.pid)


def _launch(log: Path, env: dict[str, str], main_class: str, *args: str) -> subprocess.Popen:
    """Start ``spark-class main_class args`` as the leader of a new process group, dying with this thread."""
    with open(log, "ab") as out:
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)


def die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGKILL when the thread that started it ends (exec keeps it)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_for_worker(cluster: LocalCluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a cluster JVM exited with {process.returncode}\n{cluster.log_tail()}")
        if _alive_workers(cluster.web_url) >= 1:
            return
        time.sleep(0.5)
    raise TimeoutError(f"no worker registered with {cluster.master_url} within {timeout_s:.0f} s\n"
                       f"{cluster.log_tail()}")


def _alive_workers(web_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=2) as response:
            state = json.load(response)
    except (OSError, ValueError):
        return 0  # the master's web UI is not up yet
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def stop_cluster(cluster: LocalCluster, grace_s: float = 10.0) -> None:
    """Stop the worker (and its executors), then the master; SIGTERM, then SIGKILL after ``grace_s``."""
    for process in reversed(cluster.processes):
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(process, signal.SIGKILL)  # whatever is left in the group: an executor, a launcher
        process.wait()
    cluster.processes.clear()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # the process leads its own group (start_new_session)
    except ProcessLookupError:
        pass


def group_is_empty(pid: int, wait_s: float = 5.0) -> bool:
    """Whether no process is left in the process group ``pid`` led (waiting ``wait_s`` for killed ones to go)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def group_members(pid: int) -> str:
    """``ps`` lines of the processes in group ``pid`` (for failure messages)."""
    listing = subprocess.run(["ps", "-eo", "pid,pgid,stat,args"], capture_output=True, text=True).stdout
    return "\n".join(line[:160] for line in listing.splitlines() if line.split()[1:2] == [str(pid)])


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
