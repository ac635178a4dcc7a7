"""An operator's failure is reported once (issue 19, item 7).

A user function that raises inside a running flow stops it with one report:
the operator's name, the exception with its notes (the record it failed on),
and the user's traceback, printed once, without the engine's own frames. The
same in a multi-process run, where the traceback crosses as text from the
worker process. Scripts run in a fresh interpreter, as a user runs them, and
the test reads what Python prints on stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import elastream as es

SRC = str(Path(es.__file__).resolve().parents[1])
USER_LINE = "return 1 / (x - 3)"
NOTE = "user note: x is 3"

SCRIPT = textwrap.dedent('''
    import sys
    import elastream as es

    def divide(x):
        try:
            return 1 / (x - 3)
        except ZeroDivisionError as exc:
            exc.add_note("user note: x is " + repr(x))
            raise

    if __name__ == "__main__":
        flow = es.Flow("report")
        flow.source(es.ops.FromIterable(range(10)), name="numbers").map(divide, name="divide") \\
            .sink(es.ops.Collect(), name="out")
        if sys.argv[1] == "processes":
            runner = es.Runner(processes=2, placement={"numbers": 0, "divide": 1, "out": 0})
        else:
            runner = es.Runner(threads=2)
        runner.run(flow)
''')


def run_script(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "report.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=90,
                          cwd=tmp_path, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("mode", ["threads", pytest.param("processes", marks=pytest.mark.slow)])
def test_failure_prints_the_user_traceback_once_without_engine_frames(tmp_path: Path, mode: str):
    done = run_script(tmp_path, mode)
    err = done.stderr
    assert done.returncode == 1, err
    assert err.count(USER_LINE) == 1, err
    assert err.count(NOTE) == 1, err
    assert f'{tmp_path / "report.py"}", line 7, in divide' in err, err  # the user's file, even from a worker
    assert "operator 'divide' failed: ZeroDivisionError: division by zero" in err, err
    assert "elastream/runtime" not in err and "elastream/processes" not in err, err
    assert err.count("Traceback (most recent call last)") <= 2, err  # the user's, and where run() was called


def test_operator_error_keeps_the_original_exception(tmp_path: Path):
    flow = es.Flow("keeps")
    flow.source(es.ops.FromIterable(range(5)), name="numbers").map(lambda x: 1 // (x - 2), name="divide") \
        .sink(es.ops.Collect(), name="out")
    with pytest.raises(es.OperatorError) as info:
        es.Runner().run(flow)
    error = info.value
    assert error.operator == "divide"
    assert isinstance(error.cause, ZeroDivisionError) and error.__cause__ is error.cause
    assert error.partial is not None and "out" in error.partial.outputs
    assert str(error) == "operator 'divide' failed: ZeroDivisionError: integer division or modulo by zero"
    # The details start at the user's lambda: no frame of the engine's is left above it.
    assert "test_error_report.py" in error.details and "elastream/runtime" not in error.details


def test_failure_inside_an_elastream_operator_keeps_only_the_frame_that_raised(tmp_path: Path):
    flow = es.Flow("sink")
    flow.source(es.ops.FromIterable(["abc"]), name="words").sink(es.ops.ToCSV(tmp_path / "out.csv"), name="out")
    with pytest.raises(es.OperatorError, match="record 1 'abc' is a str") as info:
        es.Runner().run(flow)
    details = info.value.details
    assert "elastream/ops/file_sinks.py" in details and "elastream/runtime" not in details


def test_remote_failure_shows_its_traceback_text_once():
    cause = RuntimeError("boom")
    details = 'Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: \'k\'\n'
    error = es.OperatorError("op", cause, details, summary="KeyError: 'k'")
    assert str(error).splitlines()[0] == "operator 'op' failed: KeyError: 'k'"
    assert str(error).count('File "x.py"') == 1
