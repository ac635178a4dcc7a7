"""elastream's Spark jobs on a real standalone cluster: a master and one worker on 127.0.0.1 (cluster_fixture.py).

The executors run a Python that sees the driver's packages but has no
elastream (``executor_python``), so every test that passes proves the package
was shipped with the job. Each driver is a separate process (the CLI or a
small script), as a user runs it; this process keeps its own local session.

Only :func:`test_flow_on_the_cluster_equals_the_local_run` runs by default;
the rest are marked ``cluster`` and run with ``pytest -m cluster``: among
them, two TPCx-BB queries on the streaming engine (q15, and q01: baskets keyed
by ticket, then counts keyed by item pair, then a stateful top) and q15 on
the batch engine, each against the local engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster_fixture import LocalCluster, die_with_parent, executor_python, group_is_empty, group_members, \
    running_cluster

pytestmark = pytest.mark.spark
DRIVER_TIMEOUT_S = 240
SCALE, SEED = "0.01", "11"
#: The flags that give a non-empty answer at scale 0.01 (tpcxbb_cases.py).
QUERY_FLAGS = {
    "q15": ["--start-date", "2001-01-01", "--end-date", "2006-01-02", "--store-sk", "3"],
    "q01": ["--viewed-together-count", "1", "--stores", *map(str, range(11))],
}


def slow_cluster_test(test):
    """Mark a slow cluster test (a JVM driver each): it runs only when ``-m`` names the ``cluster`` marker.

    A skip mark rather than a skipping fixture, so that a skipped test starts no cluster.
    """
    marks = [pytest.mark.cluster, pytest.mark.timeout(600),
             pytest.mark.skipif("'cluster' not in (config.option.markexpr or '')",
                                reason="a slow cluster test: run with `pytest -m cluster`")]
    for mark in marks:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """One standalone master and worker (1 core, 1g) for the whole module, stopped at its end."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
    left = [group_members(pid) for pid in running.pids if not group_is_empty(pid)]
    assert not left, f"cluster processes outlived the fixture:\n{left}"


@pytest.fixture(scope="module")
def executors_python(tmp_path_factory) -> Path:
    """The executors' Python: the driver's packages, no elastream."""
    return executor_python(tmp_path_factory.mktemp("executor-python"))


def run_driver(args: list[str], cwd: Path, executors: Path, env: Mapping[str, str] | None = None
               ) -> subprocess.CompletedProcess:
    """Run a driver process (``args``) whose executors use ``executors``.

    It is killed with its JVM on a timeout, and by the kernel if this process dies first.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER", "PYSPARK_SUBMIT_ARGS")}
    full_env.update({"PYSPARK_PYTHON": str(executors), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})
    process = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, preexec_fn=die_with_parent)
    try:
        out, err = process.communicate(timeout=DRIVER_TIMEOUT_S)
    finally:
        if process.poll() is None or not group_is_empty(process.pid):
            os.killpg(process.pid, signal.SIGKILL)  # the driver and its JVM share the group
            process.wait()
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def elastream_cli(*args: str) -> list[str]:
    """The ``elastream`` command of this environment."""
    return [str(Path(sys.executable).parent / "elastream"), *args]


FLOW_SCRIPT = textwrap.dedent('''
    import json, sys
    import pyarrow as pa, pyarrow.parquet as pq
    import elastream as es
    from elastream.spark.executors import check_executors
    from elastream.spark.session import get_session

    pq.write_table(pa.table({"user": ["ann", "bob", "ann", "cy", "bob", "ann"], "ms": [10, 20, 30, 40, 50, 60]}),
                   "clicks.parquet")
    flow = es.Flow("on-a-cluster")
    (flow.source(es.ops.FromParquet("clicks.parquet"))
         .map(lambda r: {**r, "ms": r["ms"] + 1})
         .key_by(lambda r: r["user"]).reduce(lambda total, r: total + r["ms"], initial=int)
         .collect("out"))
    # The master comes from MASTER (standard Spark configuration); two state partitions for one executor core.
    report = check_executors(get_session(conf={"spark.sql.shuffle.partitions": "2"}))
    on_spark = es.Runner(backend="spark").run(flow).outputs["out"]
    print(json.dumps({"spark": on_spark, "local": es.Runner().run(flow).outputs["out"],
                      "executor_elastream": [p.elastream_file for p in report.pythons]}))
''')


@pytest.mark.timeout(600)  # four JVMs (master, worker, executor, driver) on two cores: slow when the machine is busy
def test_flow_on_the_cluster_equals_the_local_run(cluster, executors_python, tmp_path):
    (tmp_path / "flow.py").write_text(FLOW_SCRIPT)
    done = run_driver([sys.executable, "flow.py"], tmp_path, executors_python, {"MASTER": cluster.master_url})

    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    expected = [["ann", 11], ["bob", 21], ["ann", 42], ["cy", 41], ["bob", 72], ["ann", 103]]
    assert answer["local"] == expected
    assert answer["spark"] == expected
    # The executors imported elastream from the zip the session shipped: they have none of their own.
    assert [Path(f).parts[-3].endswith(".zip") for f in answer["executor_elastream"]] == [True]


# -- behind the marker: the TPCx-BB queries through the CLI, and the check's message ---------------------------------

@pytest.fixture(scope="module")
def cluster_data(cluster, executors_python, tmp_path_factory) -> Path:
    """``elastream datagen`` run on the cluster (scale 0.01, seed 11)."""
    out = tmp_path_factory.mktemp("tpcxbb") / "sf"
    done = run_driver(elastream_cli("datagen", "tpcxbb", "--scale", SCALE, "--seed", SEED, "--out", str(out),
                                    "--master", cluster.master_url), out.parent, executors_python)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def local_answers(cluster_data, executors_python, tmp_path_factory):
    """Each query's answer from the local engine (no Spark), the reference for the Spark engines (made once)."""
    answers: dict[str, pa.Table] = {}

    def answer(query: str) -> pa.Table:
        if query not in answers:
            out = tmp_path_factory.mktemp("local") / f"{query}.parquet"
            answers[query] = _answer("local", query, cluster_data, out, None, executors_python)
        return answers[query]
    return answer


def _answer(engine: str, query: str, data: Path, out: Path, master: str | None, executors: Path) -> pa.Table:
    args = ["query", query, "--data", str(data), "--engine", engine, "--out", str(out), *QUERY_FLAGS[query]]
    done = run_driver(elastream_cli(*args, *(["--master", master] if master else [])), out.parent, executors)
    assert done.returncode == 0, done.stderr[-3000:]
    return pq.read_table(out)


@slow_cluster_test
@pytest.mark.parametrize(("engine", "query"), [("spark-streaming", "q15"), ("spark-streaming", "q01"),
                                               ("spark-batch", "q15")])
def test_queries_on_the_cluster_equal_the_local_engine(engine, query, cluster, cluster_data, local_answers,
                                                      executors_python, tmp_path):
    from elastream.tpcxbb.answers import answer_difference

    expected = local_answers(query)
    actual = _answer(engine, query, cluster_data, tmp_path / f"{engine}.parquet", cluster.master_url,
                     executors_python)

    assert expected.num_rows > 0
    assert actual.schema == expected.schema
    assert answer_difference(query, expected, actual) is None


CHECK_SCRIPT = textwrap.dedent('''
    import sys
    from elastream.spark.executors import ExecutorEnvironmentError, check_executors
    from elastream.spark.session import get_session

    try:
        check_executors(get_session(sys.argv[1]))
    except ExecutorEnvironmentError as error:
        print(error)
        sys.exit(3)
''')


@slow_cluster_test
def test_executors_without_pyarrow_fail_the_check_saying_what_to_install(cluster, tmp_path):
    from elastream.spark.shipping import pinned_ranges

    no_pyarrow = executor_python(tmp_path / "python", hide=["pyarrow"])
    (tmp_path / "check.py").write_text(CHECK_SCRIPT)
    done = run_driver([sys.executable, "check.py", cluster.master_url], tmp_path, no_pyarrow)

    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.strip() == (
        f"the Spark executors on {cluster.master_url} cannot import pyarrow (needed by elastream's streaming "
        f"translation): install it in the executors' Python ({no_pyarrow} on each worker): "
        f'pip install "pyarrow{pinned_ranges()["pyarrow"]}"')


# -- without a cluster: the zip, and what the executors' answers mean ------------------------------------------------

def test_the_package_zip_imports_the_translation_without_compiled_extensions(tmp_path):
    from elastream.spark.shipping import package_zip

    first, second = package_zip(tmp_path), package_zip(tmp_path)
    names = zipfile.ZipFile(first).namelist()
    python = executor_python(tmp_path / "python")  # no elastream of its own
    script = ("import sys; sys.path.insert(1, sys.argv[1]); import elastream.spark.streaming, "
              "elastream.tpcxbb.pipelines, elastream.bench, elastream.ordered.routing as r, elastream.ipc.codec; "
              "from elastream.operators.untrack import extension_untrack; "
              "print(elastream.__file__, r._splitfast, extension_untrack())")
    done = subprocess.run([str(python), "-c", script, str(first)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)

    assert first == second and len(list(tmp_path.glob("*.zip"))) == 1  # cached by content
    assert "elastream/spark/" in names and "elastream/spark/layers.py" in names  # a folder entry: no __init__.py
    assert not [n for n in names if n.endswith((".so", ".c", ".pyc"))]
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{first}/elastream/__init__.py", "None", "None"]


def test_masters_that_get_the_package_shipped():
    from elastream.spark.shipping import is_local_master

    assert [is_local_master(m) for m in ("local", "local[2]", "local[*, 3]", "local-cluster[2,1,1024]",
                                         "spark://127.0.0.1:7077", "yarn")] == [True, True, True, False, False, False]


def test_version_ranges():
    from elastream.spark.shipping import pinned_ranges, satisfies

    assert pinned_ranges()["pyarrow"] == ">=14,<25" and pinned_ranges()["cloudpickle"] == ">=3,<4"
    assert [satisfies(v, ">=3,<4") for v in ("2.1.0", "3", "3.1.3", "4.0.0rc1")] == [False, True, True, False]
    assert satisfies("1.0.3", ">=1.0.3,<2") and not satisfies("1.0.2", ">=1.0.3,<2")


def _python(**changes):
    from elastream.spark.executors import ExecutorPython

    fine = dict(executable="/usr/bin/python3", python=tuple(sys.version_info[:3]), elastream_version="0.1.0",
                elastream_file="./elastream-0.1.0-0123456789abcdef.zip/elastream/__init__.py", elastream_error=None,
                versions={"pyarrow": "24.0.0", "cloudpickle": "3.1.3"}, errors={})
    return ExecutorPython(**{**fine, **changes})


def test_what_the_executors_answers_mean():
    from elastream.spark.executors import ExecutorReport, report_problems

    master = "spark://10.0.0.1:7077"
    needs = {"pyarrow": "needed by elastream's streaming translation", "cloudpickle": "pickles"}
    on = f"the Spark executors on {master}"
    where = "install it in the executors' Python (/usr/bin/python3 on each worker)"
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert report_problems(ExecutorReport(master, (_python(),)), needs) == []
    broken = _python(versions={"pyarrow": None, "cloudpickle": "2.1.0"}, errors={"pyarrow": "ModuleNotFoundError"})
    assert report_problems(ExecutorReport(master, (broken,)), needs) == [
        f"{on} cannot import pyarrow (needed by elastream's streaming translation): {where}: "
        f'pip install "pyarrow>=14,<25"',
        f"{on} have cloudpickle 2.1.0, but elastream needs cloudpickle>=3,<4: {where}: "
        f'pip install "cloudpickle>=3,<4"']
    old = _python(python=(3, 9, 2))
    assert report_problems(ExecutorReport(master, (old,)), {}) == [
        f"{on} run Python 3.9 (/usr/bin/python3) and the driver runs Python {driver} ({sys.executable}): "
        f"Spark needs the same major.minor on both: point spark.pyspark.python (or PYSPARK_PYTHON) "
        f"at a Python {driver} on each worker"]
    installed = _python(elastream_file="/usr/lib/python3/site-packages/elastream/__init__.py",
                        elastream_version="0.0.9")
    assert report_problems(ExecutorReport(master, (installed,)), {})[0].startswith(
        f"{on} import elastream 0.0.9 from /usr/lib/python3/site-packages/elastream/__init__.py instead of the "
        f"package shipped with the job")
    blocked = _python(elastream_version=None, elastream_file=None, elastream_error="ModuleNotFoundError: psutil",
                      elastream_missing="psutil", errors={"psutil": "ModuleNotFoundError: No module named 'psutil'"})
    assert report_problems(ExecutorReport(master, (blocked,)), {}) == [
        f"{on} cannot import psutil (needed by elastream's streaming translation; ModuleNotFoundError: No module "
        f'named \'psutil\'): {where}: pip install "psutil>=5.9,<8"']


def test_what_a_failed_check_job_means():
    from elastream.spark.executors import _job_failure

    class Context:
        master, pythonExec = "spark://10.0.0.1:7077", "/opt/py/bin/python3"

    on = "the Spark executors on spark://10.0.0.1:7077"
    mismatch = RuntimeError("[PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.10 than that in "
                            "driver: 3.11, PySpark cannot run with different minor versions.")
    assert _job_failure(Context, mismatch, False, 180).startswith(f"{on} run Python 3.10 (/opt/py/bin/python3)")
    missing = RuntimeError('java.io.IOException: Cannot run program "/opt/py/bin/python3": error=2, No such file')
    assert _job_failure(Context, missing, False, 180).startswith(
        f"{on} cannot start their Python (/opt/py/bin/python3)")
    assert _job_failure(Context, RuntimeError("Job 3 cancelled"), True, 180).startswith(
        f"{on} did not run elastream's check job within 180 s")


KILLED_SCRIPT = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from cluster_fixture import running_cluster

    with running_cluster(Path(sys.argv[1])) as cluster:
        print(" ".join(map(str, cluster.pids)), flush=True)
        time.sleep(600)
''')


@slow_cluster_test
def test_a_killed_test_process_leaves_no_cluster_behind(tmp_path):
    (tmp_path / "hold.py").write_text(KILLED_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    holder = subprocess.Popen([sys.executable, "hold.py", str(tmp_path / "cluster")], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids = [int(pid) for pid in holder.stdout.readline().split()]  # once the worker has registered
    finally:
        holder.kill()  # SIGKILL: no finally block, no atexit runs in the holder
        holder.wait()

    assert len(pids) == 2
    left = [group_members(pid) for pid in pids if not group_is_empty(pid, wait_s=30)]
    assert not left, f"cluster processes outlived a killed test process:\n{left}"
