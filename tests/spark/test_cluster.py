"""elastream's Spark jobs on a real standalone cluster: a master and one worker on 127.0.0.1 (cluster_fixture.py).

The executors run a Python that sees the driver's packages but has no
elastream (``executor_python``), so every test that passes proves the package
was shipped with the job. Each driver is a separate process (the CLI or a
small script), as a user runs it; this process keeps its own local session.

Only :func:`test_flow_on_the_cluster_equals_the_local_run` runs by default;
the rest are marked ``cluster`` and run with ``pytest -m cluster``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cluster_fixture import LocalCluster, executor_python, group_is_empty, running_cluster

pytestmark = pytest.mark.spark
DRIVER_TIMEOUT_S = 240
SCALE, SEED = "0.01", "11"
#: q15 at scale 0.01 needs these for a non-empty answer (tpcxbb_cases.py).
Q15_FLAGS = ["--start-date", "2001-01-01", "--end-date", "2006-01-02", "--store-sk", "3"]


@pytest.fixture(autouse=True)
def _cluster_marker_selected(request):
    """Tests marked ``cluster`` run only when ``-m`` names the marker (they are slow: a JVM driver each)."""
    if request.node.get_closest_marker("cluster") and "cluster" not in (request.config.option.markexpr or ""):
        pytest.skip("a slow cluster test: run with `pytest -m cluster`")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """One standalone master and worker (1 core, 1g) for the whole module, stopped at its end."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
    assert all(group_is_empty(p) for p in running.pids), "a cluster JVM outlived the fixture"


@pytest.fixture(scope="module")
def executors_python(tmp_path_factory) -> Path:
    """The executors' Python: the driver's packages, no elastream."""
    return executor_python(tmp_path_factory.mktemp("executor-python"))


def run_driver(args: list[str], cwd: Path, executors: Path, env: Mapping[str, str] | None = None
               ) -> subprocess.CompletedProcess:
    """Run a driver process (``args``) whose executors use ``executors``; killed with its JVM on a timeout."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER", "PYSPARK_SUBMIT_ARGS")}
    full_env.update({"PYSPARK_PYTHON": str(executors), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})
    process = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
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
    report = check_executors(get_session())          # the master comes from MASTER (standard Spark configuration)
    on_spark = es.Runner(backend="spark").run(flow).outputs["out"]
    print(json.dumps({"spark": on_spark, "local": es.Runner().run(flow).outputs["out"],
                      "executor_elastream": [p.elastream_file for p in report.pythons]}))
''')


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


def _answer(engine: str, data: Path, out: Path, master: str | None, executors: Path) -> pq.ParquetFile:
    args = ["query", "q15", "--data", str(data), "--engine", engine, "--out", str(out), *Q15_FLAGS]
    done = run_driver(elastream_cli(*args, *(["--master", master] if master else [])), out.parent, executors)
    assert done.returncode == 0, done.stderr[-3000:]
    return pq.read_table(out)


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-streaming", "spark-batch"])
def test_q15_on_the_cluster_equals_the_local_engine(engine, cluster, cluster_data, executors_python, tmp_path):
    from elastream.tpcxbb.answers import answer_difference

    expected = _answer("local", cluster_data, tmp_path / "local.parquet", None, executors_python)
    actual = _answer(engine, cluster_data, tmp_path / f"{engine}.parquet", cluster.master_url, executors_python)

    assert expected.num_rows > 0
    assert actual.schema == expected.schema
    assert answer_difference("q15", expected, actual) is None


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


@pytest.mark.cluster
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
