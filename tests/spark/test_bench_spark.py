"""``elastream bench spark``: its JSON shape, and that it checks Spark's answers, not only times them.

The quick run (local target only) runs in this process on the suites' shared
local session and data set (conftest.py); the cluster target would start a
standalone cluster, which only the ``cluster``-marked tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastream.bench import spark as bench
from elastream.bench._spark_report import goal_check, with_ratios
from elastream.cli.main import main
from elastream.spark.progress import BatchProgress, batch_percentiles_ms, steady_state

pytestmark = pytest.mark.spark


@pytest.mark.timeout(300)  # a loaded two-core machine runs Spark's micro-batches slowly
def test_quick_json_checks_answers_against_the_local_engine(spark, tpcxbb_data, tmp_path, capsys):
    master = str(spark.sparkContext.master)  # the shared session: the bench reuses it
    # The stream cut to 12,000 rows in batches of 4,000 (three data batches: a steady state) and a native
    # reference of few keys (one Python call per key per batch): little time.
    code = main(["bench", "spark", "--quick", "--json", "--data", str(tpcxbb_data), "--queries", "q04",
                 "--stream-rows", "12000", "--rows-per-batch", "4000", "--native-keys", "50", "--local-master", master,
                 "--plot", str(tmp_path / "spark.png")])

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "spark" and result["queries"] == ["q04"]
    assert set(result["targets"]) == {"local"}
    local = result["targets"]["local"]
    row = local["queries"]["q04"]
    assert row["match"] is True and row["difference"] is None  # equal to the local engine's answer
    assert row["answer_rows"] == result["local_engine"]["q04"]["answer_rows"] > 0
    assert row["input_rows"] == result["local_engine"]["q04"]["input_rows"] == 12_000
    assert result["stream_rows_cap"] == 12_000 and result["rows_per_batch"] == 4_000
    assert row["steady_batches"] >= 2 and row["steady_tuples_per_second"] > 0
    assert row["native_ratio"] == pytest.approx(row["steady_tuples_per_second"]
                                                / local["native"]["steady_tuples_per_second"])
    assert local["native"]["match"] is True and local["native"]["input_rows"] == row["input_rows"]
    assert local["native"]["keys"] == 50
    assert result["all_match"] is True
    assert result["goal"]["scale_is_the_goals"] is False and result["goal"]["met"] is False
    assert (tmp_path / "spark.png").stat().st_size > 0 and result["plot"] == str(tmp_path / "spark.png")
    assert "load_average_1min" in result["machine"]


def test_steady_state_leaves_out_each_querys_first_batch_and_empty_batches():
    batches = [BatchProgress("a", 0, 1, 900), BatchProgress("a", 1, 100, 50), BatchProgress("a", 2, 0, 40),
               BatchProgress("a", 3, 100, 150), BatchProgress("b", 0, 50, 700), BatchProgress("b", 1, 50, 50)]

    assert steady_state(batches) == (250, 0.25)
    assert batch_percentiles_ms(batches) == [50.0, 150.0]
    assert steady_state(batches[:1]) == (0, 0.0) and batch_percentiles_ms([]) == [None, None]


def test_goal_check_names_the_queries_below_the_goal():
    targets = with_ratios({"local": {"master": "local[2]", "native": {"steady_tuples_per_second": 40_000.0},
                                     "queries": {"q01": {"steady_tuples_per_second": 30_000.0},
                                                 "q02": {"steady_tuples_per_second": 15_000.0}}}})
    goal = goal_check({"scale": 0.5, "targets": targets}, 25_000.0, 0.5, 0.5)

    assert targets["local"]["queries"]["q01"]["native_ratio"] == 0.75
    assert goal["below_throughput"] == ["q02"] and goal["below_ratio"] == ["q02"] and goal["met"] is False
    assert goal["min_steady_tuples_per_second"] == 15_000.0
    assert goal_check({"scale": 0.5, "targets": {}}, 25_000.0, 0.5, 0.5)["met"] is None


@pytest.mark.parametrize("text", ["", "local,moon", "cloud"])
def test_targets_must_be_local_or_cluster(text):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)

    with pytest.raises(SystemExit):
        parser.parse_args(["--targets", text])
    assert parser.parse_args(["--targets", "cluster,local"]).targets == ["cluster", "local"]



@pytest.mark.cluster
@pytest.mark.timeout(900)
@pytest.mark.skipif("'cluster' not in (config.option.markexpr or '')",
                    reason="a slow cluster test: run with `pytest -m cluster`")
def test_quick_on_the_two_worker_cluster_matches_and_leaves_no_jvm(tpcxbb_data):
    # A driver process of its own, as a user runs it: this process keeps its local session.
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER", "PYSPARK_SUBMIT_ARGS")}
    done = subprocess.run([str(Path(sys.executable).parent / "elastream"), "bench", "spark", "--quick", "--json",
                           "--data", str(tpcxbb_data), "--queries", "q04", "--stream-rows", "12000",
                           "--rows-per-batch", "4000", "--native-keys", "50", "--targets", "cluster", "--plot", "-"],
                          env=env, capture_output=True, text=True, timeout=800)

    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    cluster = result["targets"]["cluster"]
    assert (cluster["workers"], cluster["cores_per_worker"], cluster["cores"]) == (2, 1, 2)
    assert cluster["master"].startswith("spark://127.0.0.1:")
    assert cluster["queries"]["q04"]["match"] is True and cluster["native"]["match"] is True
    assert result["plot"] is None and result["goal"]["met"] is None  # no local target: the goal is not checked
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "elastream-bench-cluster-" not in listing  # the cluster's JVMs (their conf folder) are gone
