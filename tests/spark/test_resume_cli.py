"""``elastream query ... --engine spark-streaming --checkpoint DIR --resume``: a stopped run carries on.

* ``--max-batches N`` stops the run after N micro-batches (exit code 3, saying
  how to carry on); the same command without it resumes in the same folder
  and answers as the local engine does;
* ``--resume`` refuses a folder of the same query with other parameters, and
  the flags that need others say which.

q01 (a keyed multi-stage query: baskets by ticket, then counts by item pair,
then a stateful top) at scale 0.01, in micro-batches of 2,000 rows.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from elastream.cli.main import main
from elastream.tpcxbb.answers import answer_difference
from elastream.tpcxbb.io import row_count
from tpcxbb_cases import CASES

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: q01 with the parameters that give a non-trivial answer at scale 0.01 (tpcxbb_cases.CASES).
Q01_FLAGS = ["--viewed-together-count", str(CASES["q01"].viewed_together_count),
             "--stores", *map(str, CASES["q01"].stores)]
ROWS_PER_BATCH = 2_000


def query(data, engine: str, *flags: str) -> list[str]:
    return ["query", "q01", "--data", str(data), "--engine", engine, *Q01_FLAGS, *flags]


def streaming(data, checkpoint, *flags: str) -> list[str]:
    return query(data, "spark-streaming", "--checkpoint", str(checkpoint), "--resume", "--rows-per-batch",
                 str(ROWS_PER_BATCH), "--shuffle-partitions", "2", *flags)


def test_a_run_stopped_after_some_batches_resumes_with_the_same_command(spark, tpcxbb_data, tmp_path, capsys):
    checkpoint = tmp_path / "q01-run"
    rows = row_count(tpcxbb_data, "ss_stream")
    assert rows > 2 * ROWS_PER_BATCH  # the stream has batches left after the stop

    assert main(streaming(tpcxbb_data, checkpoint, "--max-batches", "2")) == 3
    stopped = capsys.readouterr().err
    assert stopped.strip() == (f"elastream query: stopped after 2 micro-batches (--max-batches) with "
                               f"{2 * ROWS_PER_BATCH:,} stream rows read so far; {checkpoint} keeps the run: "
                               "run the same command again to carry on")

    assert main(streaming(tpcxbb_data, checkpoint, "--out", str(tmp_path / "spark.parquet"))) == 0
    assert main(query(tpcxbb_data, "local", "--out", str(tmp_path / "local.parquet"))) == 0
    expected, resumed = pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "spark.parquet")
    assert expected.num_rows > 0 and resumed.schema == expected.schema
    assert answer_difference("q01", expected, resumed) is None
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["q01-run"]  # no subfolder: DIR itself

    other = streaming(tpcxbb_data, checkpoint, "--viewed-together-count", "2")  # the last flag wins
    assert main(other) == 2
    refused = capsys.readouterr().err
    assert f"checkpoint folder {checkpoint} holds another run (its identity differ)" in refused


@pytest.mark.parametrize(("flags", "message"), [
    (["--resume"], "--resume needs --checkpoint DIR (the folder the run is kept in)"),
    (["--max-batches", "1"], "--max-batches needs --checkpoint DIR --resume (to carry the run on later)"),
])
def test_flags_that_need_others_say_which(tpcxbb_data, capsys, flags, message):
    assert main(query(tpcxbb_data, "spark-streaming", *flags)) == 2
    assert capsys.readouterr().err.strip() == f"elastream query: error: {message}"
