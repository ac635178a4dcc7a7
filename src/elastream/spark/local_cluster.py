"""A real Spark standalone cluster on loopback: one master and N workers on 127.0.0.1, always stopped.

For tests and benchmarks that need a cluster without one: :func:`running_cluster`
starts a standalone master and ``workers`` workers (``cores_per_worker`` cores
and ``memory`` each) with the launcher classes the installed pyspark ships
(``bin/spark-class``), every address bound to 127.0.0.1 (``SPARK_LOCAL_IP``,
``--host``) on free ports, so no traffic leaves loopback. It waits until every
worker has registered with the master (the master's ``/json`` page) and stops
them all on every way out of the ``with`` block (an exception, a
KeyboardInterrupt, a normal exit).

No JVM outlives the cluster: each JVM is the leader of its own process group,
so stopping the group also stops the executor JVMs a worker launched; each is
also told by the kernel to die with the thread that started it
(``PR_SET_PDEATHSIG``), so even a killed Python process leaves no JVM behind.
The master's REST submission server is off and no user Spark configuration is
read (a fresh ``SPARK_CONF_DIR``); logs go to ``folder``.

Drivers reach it at :attr:`LocalCluster.master_url` (``spark://127.0.0.1:PORT``);
a driver on this machine should bind to loopback too
(:func:`elastream.spark.session.get_session` does so for a loopback master).

Threading: use from one thread; the JVMs die with the thread that started them.

Example::

    with running_cluster(Path("/tmp/cluster"), workers=2, cores_per_worker=1) as cluster:
        spark = get_session(cluster.master_url)
        spark.range(10).count()
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: prctl option: the signal the kernel sends a child when the thread that started it ends.
PR_SET_PDEATHSIG = 1
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class LocalCluster:
    """A running standalone master and its workers (see :func:`running_cluster`)."""

    master_url: str
    web_url: str
    folder: Path
    workers: int = 1
    cores_per_worker: int = 1
    processes: list[subprocess.Popen] = field(default_factory=list)
    #: every JVM's pid (each leads its process group), kept after the cluster stops
    pids: list[int] = field(default_factory=list)

    @property
    def cores(self) -> int:
        """Executor cores over all workers."""
        return self.workers * self.cores_per_worker

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the master's and the workers' logs (for failure messages)."""
        out = []
        for path in [self.folder / "master.log", *sorted(self.folder.glob("worker*.log"))]:
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            out.append(f"--- {path.name}\n" + "\n".join(text))
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
def running_cluster(folder: Path, *, workers: int = 1, cores_per_worker: int = 1, memory: str = "1g",
                    timeout_s: float = 90.0, cores: int | None = None) -> Iterator[LocalCluster]:
    """A standalone master and ``workers`` workers on 127.0.0.1, stopped (with their executors) when the block exits.

    ``cores_per_worker`` and ``memory`` are what each worker offers (``cores`` is
    an older name of ``cores_per_worker``). Raises RuntimeError when a JVM exits
    while starting and TimeoutError when the workers have not all registered
    within ``timeout_s`` (both with the logs' last lines); the cluster is
    stopped first.
    """
    if cores is not None:
        cores_per_worker = cores
    if workers < 1 or cores_per_worker < 1:
        raise ValueError(f"a cluster needs at least one worker with one core, got {workers} x {cores_per_worker}")
    folder.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    cluster = LocalCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", folder, workers,
                           cores_per_worker)
    env = cluster_env(folder)
    try:
        _start(cluster, _launch(folder / "master.log", env, MASTER_CLASS, "--host", "127.0.0.1",
                                "--port", str(port), "--webui-port", str(web_port)))
        for n in range(workers):
            _start(cluster, _launch(_worker_log(folder, n, workers), env, WORKER_CLASS, cluster.master_url,
                                    "--host", "127.0.0.1", "--cores", str(cores_per_worker), "--memory", memory,
                                    "--webui-port", str(free_port()), "--work-dir", str(folder / f"work{n or ''}")))
        _wait_for_workers(cluster, timeout_s)
        yield cluster
    finally:
        stop_cluster(cluster)


def _worker_log(folder: Path, n: int, workers: int) -> Path:
    """``worker.log`` for a single worker (the name the tests read), ``worker-N.log`` for several."""
    return folder / ("worker.log" if workers == 1 else f"worker-{n}.log")


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


def _wait_for_workers(cluster: LocalCluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a cluster JVM exited with {process.returncode}\n{cluster.log_tail()}")
        if alive_workers(cluster.web_url) >= cluster.workers:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{cluster.workers} worker(s) did not all register with {cluster.master_url} within "
                       f"{timeout_s:.0f} s\n{cluster.log_tail()}")


def alive_workers(web_url: str) -> int:
    """How many workers the master at ``web_url`` lists as ALIVE (0 while its web UI is not up)."""
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=2) as response:
            state = json.load(response)
    except (OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def stop_cluster(cluster: LocalCluster, grace_s: float = 10.0) -> None:
    """Stop the workers (and their executors), then the master; SIGTERM, then SIGKILL after ``grace_s``."""
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
