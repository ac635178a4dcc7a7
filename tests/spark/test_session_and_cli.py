"""The Spark session rules, the stage progress display, and the datagen / query command lines."""

from __future__ import annotations

import io as stdio
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from elastream.cli.main import main
from elastream.spark import session as sessions
from elastream.spark.progress import THREAD_NAME, StageProgress
from elastream.tpcxbb import io

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]


def test_configured_master_follows_standard_spark_configuration(tmp_path, monkeypatch):
    for var in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "SPARK_HOME", "MASTER"):
        monkeypatch.delenv(var, raising=False)
    assert sessions.configured_master() is None
    (tmp_path / "spark-defaults.conf").write_text("# comment\nspark.master   spark://head:7077\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert sessions.configured_master() == "spark://head:7077"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master local[3] pyspark-shell")
    assert sessions.configured_master() == "local[3]"


def test_session_conf_keeps_the_callers_keys_and_quietens_logs():
    conf = sessions.session_conf({"spark.sql.shuffle.partitions": "2"})
    assert conf["spark.sql.shuffle.partitions"] == "2" and conf["spark.ui.showConsoleProgress"] == "false"
    assert "log4j2.configurationFile" in conf["spark.driver.extraJavaOptions"]
    assert "spark.driver.extraJavaOptions" not in sessions.session_conf(quiet=False)


def test_the_session_is_shared(spark):
    assert sessions.get_session() is spark
    assert not sessions.is_remote(spark)


def test_stage_progress_shows_stages_and_joins_its_thread(spark):
    import threading

    out = stdio.StringIO()
    with StageProgress(spark, Console(file=out, force_terminal=True, width=100), interval=0.05) as progress:
        assert any(t.name == THREAD_NAME for t in threading.enumerate())
        with progress.step("count"):
            assert spark.range(0, 200_000, 1, 4).selectExpr("sum(id)").first()[0] == 199_999 * 100_000
    assert not any(t.name == THREAD_NAME for t in threading.enumerate())
    assert progress.step_seconds["count"] > 0
    assert "count" in out.getvalue()


def test_datagen_cli_writes_every_table_and_reports_json(spark, tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["datagen", "tpcxbb", "--scale", "0.001", "--out", str(out), "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scale"] == 0.001 and report["seed"] == 3
    for name in ("store_sales", "web_clickstreams", "item", "web_page", "date_dim", "time_dim", "customer", "store",
                 "ss_stream", "wcs_stream"):
        assert report["rows"][name] == io.row_count(out, name) > 0
    assert io.read_meta(out)["rows"] == report["rows"]
    assert main(["datagen", "tpcxbb", "--scale", "-1", "--out", str(out)]) == 2
    assert "scale must be a positive number" in capsys.readouterr().err


def test_query_cli_json_table_and_parquet_output(spark, tpcxbb_data, tmp_path, capsys):
    assert main(["query", "q04", "--data", str(tpcxbb_data), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"query", "engine", "rows", "seconds", "tuples_per_second", "latency_ms"}
    assert report["query"] == "q04" and report["engine"] == "spark-batch" and report["rows"] == 1
    assert report["latency_ms"] == {"p50": None, "p99": None} and report["tuples_per_second"] > 0

    target = tmp_path / "answers" / "q01.parquet"
    argv = ["query", "q01", "--data", str(tpcxbb_data), "--engine", "spark-batch", "--stores", *map(str, range(11)),
            "--viewed-together-count", "0", "--window-s", "86400", "--limit", "2", "--out", str(target)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "window_start" in printed and "q01 on spark-batch" in printed
    written = pq.read_table(target)
    assert written.column_names == ["window_start", "item_sk_1", "item_sk_2", "cnt"]
    assert written.num_rows > 2  # up to two pairs per day


def test_query_cli_reports_malformed_data_naming_table_column_and_file(spark, tmp_path, capsys):
    folder = tmp_path / "web_clickstreams"
    folder.mkdir()
    bad = folder / "part-00000.parquet"
    pq.write_table(pa.table({"wcs_click_date_sk": [1], "wcs_click_time_sk": [1], "wcs_sales_sk": [1],
                             "wcs_item_sk": [1], "wcs_user_sk": [1]}), bad)
    assert main(["query", "q02", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "'web_clickstreams'" in err and "'wcs_web_page_sk'" in err and str(bad) in err


@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.skipif("'cluster' not in (config.option.markexpr or '')",
                    reason="starts a Spark Connect server (a JVM of its own, about a minute): "
                           "run with `pytest -m cluster`")
def test_spark_connect_session_answers_a_batch_query(tpcxbb_data, spark):
    """SPARK_REMOTE selects Spark Connect (a local Connect server here, in its own process and JVM)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from elastream.spark.batch import run_batch_query

    script = Path(sys.executable).with_name("elastream")
    env = {**os.environ, "SPARK_REMOTE": "local[1]"}
    proc = subprocess.run([str(script), "query", "q15", "--data", str(tpcxbb_data), "--engine", "spark-batch",
                           "--json"], env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["engine"] == "spark-batch"
    assert summary["rows"] == run_batch_query("q15", tpcxbb_data, spark=spark).num_rows
