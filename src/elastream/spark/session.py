"""Build (or reuse) the SparkSession every elastream Spark job runs in.

Where the session comes from, in order:

1. ``remote=`` or the ``SPARK_REMOTE`` environment variable: a Spark Connect
   session (``sc://host:port``); the connect client's packages must be
   installed (``pip install "pyspark[connect]"``).
2. ``master=`` (the CLI's ``--master``): that master URL.
3. Standard Spark configuration: a master set in ``PYSPARK_SUBMIT_ARGS``
   (``--master``), in ``$SPARK_CONF_DIR``/``$SPARK_HOME/conf``
   ``spark-defaults.conf`` (``spark.master``) or in ``MASTER`` is left to
   Spark.
4. Otherwise ``local[*]`` (every core of this machine).

Defaults that suit one machine (few shuffle partitions, no web UI, no console
progress bar, UTC session time zone, quiet logs) are applied only where the
caller's ``conf`` does not set the key. Logs are quietened by a log4j2
configuration (level ERROR) written once into the temp folder and handed to
the driver JVM at launch, unless the user already passes driver Java options.

A session for a master that is not local gets the elastream package shipped
to its executors (:func:`elastream.spark.shipping.ship_package`, a zip of its
pure-Python files added with ``addPyFile``);
:func:`elastream.spark.executors.check_executors` checks, once per session,
that the executors' Python can run the streaming translation. A standalone
master on loopback (``spark://127.0.0.1:…``) binds the driver to loopback too.

Threading: :func:`get_session` may be called from any thread; the session it
returns is shared process-wide (Spark allows one active local SparkContext per
process) and cached until :func:`stop_session`.

Example::

    spark = get_session()                       # local[*]
    spark.range(3).count() == 3
    spark = get_session(master="local[2]")      # a new master stops the cached session first
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastream.spark.shipping import ship_package

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
APP_NAME = "elastream"

#: Applied when the caller's conf does not set the key.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "4g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""

_lock = threading.Lock()
_cached: tuple[str, Any] | None = None  # (master or remote it was built for, session)


def configured_master() -> str | None:
    """The master that standard Spark configuration already sets, if any (see the module docstring)."""
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    if "--master" in args:
        i = args.index("--master")
        return args[i + 1] if i + 1 < len(args) else None
    for conf_dir in (os.environ.get("SPARK_CONF_DIR"),
                     os.environ.get("SPARK_HOME") and os.path.join(os.environ["SPARK_HOME"], "conf")):
        if conf_dir:
            master = _master_in_defaults(Path(conf_dir) / "spark-defaults.conf")
            if master:
                return master
    return os.environ.get("MASTER") or None


def _master_in_defaults(path: Path) -> str | None:
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0] == "spark.master":
            return parts[1].strip()
    return None


def _log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / "elastream-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return path


def session_conf(conf: Mapping[str, str] | None = None, *, quiet: bool = True) -> dict[str, str]:
    """The configuration a new session gets: ``conf`` over :data:`DEFAULT_CONF`, plus quiet logs.

    Example: ``session_conf({"spark.sql.shuffle.partitions": "2"})["spark.sql.shuffle.partitions"] == "2"``
    """
    merged = {**DEFAULT_CONF, **(conf or {})}
    if quiet and "spark.driver.extraJavaOptions" not in merged:
        merged["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
    return merged


def get_session(master: str | None = None, *, remote: str | None = None, conf: Mapping[str, str] | None = None,
                app_name: str = APP_NAME, quiet: bool = True) -> SparkSession:
    """The process's SparkSession, built on first use (see the module docstring for the master rules).

    A cached session is returned while the requested master (or remote) is
    the same; asking for another one stops the cached session first. ``conf``
    only takes effect when a session is built.
    """
    global _cached
    remote = remote or os.environ.get("SPARK_REMOTE") or None
    target = f"remote:{remote}" if remote else (master or configured_master() or DEFAULT_MASTER)
    with _lock:
        if _cached is not None:
            built_for, session = _cached
            if built_for == target and _is_alive(session):
                return session
            session.stop()
            _cached = None
        session = _build(target, master, remote, session_conf(conf, quiet=quiet), app_name, quiet)
        _cached = (target, session)
        return session


def _build(target: str, master: str | None, remote: str | None, conf: dict[str, str], app_name: str,
           quiet: bool) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    # Local mode needs no routable address; binding to loopback avoids Spark's hostname warning. A master on
    # loopback (a test cluster on this machine) reaches the driver there too, and no traffic leaves it.
    if not remote and (target.startswith("local") or _is_loopback_master(target)):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if remote:
        builder = builder.remote(remote)
    elif master or not configured_master():
        builder = builder.master(target)
        if target.startswith("local"):
            # Python workers otherwise start with the `python3` on PATH, which may lack pyarrow and
            # elastream (Python UDFs, mapInArrow, applyInPandasWithState): use this interpreter.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in conf.items():
        if remote and key.startswith(("spark.driver.", "spark.ui.", "spark.default.")):
            continue  # the server owns its JVM settings
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not remote:
        if quiet:
            session.sparkContext.setLogLevel("ERROR")
        ship_package(session)  # executors elsewhere have no elastream of their own (a no-op for local masters)
    return session


def _is_loopback_master(master: str) -> bool:
    """Whether ``master`` is a standalone master on this machine's loopback (``spark://127.0.0.1:7077``)."""
    host = re.match(r"spark://([^:/,]+)", master)
    return host is not None and host.group(1) in ("127.0.0.1", "localhost")


def _is_alive(session: Any) -> bool:
    try:
        jsc = getattr(session.sparkContext, "_jsc", None)
        return jsc is not None and not jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - a Connect session has no SparkContext; trust it
        return True


def stop_session() -> None:
    """Stop the cached session, if any (idempotent)."""
    global _cached
    with _lock:
        if _cached is not None:
            _cached[1].stop()
            _cached = None


def is_remote(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect session (it has no ``sparkContext``)."""
    return type(session).__module__.startswith("pyspark.sql.connect")
