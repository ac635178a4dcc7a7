"""Misusing a multi-process run fails at once, naming what is wrong and how to fix it (issue 19, items 1, 5, 7).

* a script that starts ``Runner(processes=2)`` at its top level, without ``if __name__ == "__main__":``,
  is refused before any worker starts, saying so and showing the fix;
* a worker that dies while it starts (or later, without reporting its end) fails the run with
  :class:`WorkerProcessError`: a run never returns normally without a part's outputs;
* an operator that cannot be pickled, a placement or replica count naming an unknown operator:
  errors naming the operator, raised before any worker starts, leaving nothing behind;
* ``handle.stats()`` during a run lists the operators of every process.

Scripts run in a fresh interpreter (``subprocess``), as a user runs them. The autouse fixtures of
conftest.py fail a test that leaks a ring segment or an engine thread; :func:`assert_no_worker_left`
checks processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

import elastream as es
from elastream.processes import WorkerProcessError, forkserver, stop_fork_server
from elastream.processes.main_guard import MAIN_GUARD_HINT, MainGuardError, main_is_guarded
from elastream.processes.spec import UnpicklableOperatorError

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

METHODS = ["forkserver", "spawn"]
SRC = str(Path(es.__file__).resolve().parents[1])
GUARD = 'if __name__ == "__main__":'


# -- helpers ---------------------------------------------------------------------------------
def run_script(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``body`` as a main script in a fresh interpreter, with this checkout's elastream."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)


def worker_children(before: set[int]) -> list[psutil.Process]:
    """Children of this process started since ``before``, other than the fork server and resource tracker."""
    from multiprocessing import resource_tracker

    helpers = {forkserver.fork_server_pid(), getattr(resource_tracker._resource_tracker, "_pid", None)}
    return [c for c in psutil.Process().children() if c.pid not in helpers and c.pid not in before]


def assert_no_worker_left(before: set[int]) -> None:
    assert worker_children(before) == []
    server = forkserver.fork_server_pid()
    if server is not None:
        assert psutil.Process(server).children() == []  # every worker it forked was reaped


@pytest.fixture
def children_before() -> set[int]:
    return {c.pid for c in psutil.Process().children()}


@pytest.fixture(params=METHODS)
def start_method(request) -> str:
    if request.param == "spawn":
        stop_fork_server()  # a spawn run must not count the fork server another test started
    return request.param


def pipeline(name: str = "misuse") -> es.Flow:
    flow = es.Flow(name)
    flow.source(range(100), name="src").map(lambda x: x * 2, name="double").sink(es.ops.Collect(), name="out")
    return flow


def runner(start_method: str = "forkserver", **kw) -> es.Runner:
    return es.Runner(processes=2, process_options=es.ProcessConfig(start_method=start_method), **kw)


FLOW_SCRIPT = textwrap.dedent("""
    import sys
    import elastream as es

    def run():
        flow = es.Flow("wc")
        flow.source(range(1000), name="src").map(lambda x: x * 2, name="double").sink(es.ops.Collect(), name="out")
        options = es.ProcessConfig(start_method=sys.argv[1])
        result = es.Runner(processes=2, placement={"src": 0, "double": 1, "out": 0},
                           process_options=options).run(flow, timeout=60)
        print("RESULT", len(result.outputs["out"]))
""")


# -- item 1: the __main__ guard ---------------------------------------------------------------
def test_main_is_guarded_tells_guarded_from_unguarded_top_level_code(tmp_path):
    body = f"""
        from elastream.processes.main_guard import main_is_guarded

        def check():
            return main_is_guarded()  # called through a function: the top-level statement counts

        print("top", check())
        {GUARD}
            print("guarded", check())
            try:
                print("nested", check())
            finally:
                pass
        if __name__ != "__main__":
            pass
        else:
            print("else", check())
        try:
            if "__main__" == __name__:
                print("inside_try", check())
        except ImportError:
            print("handler", check())
    """
    done = run_script(tmp_path, body)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["top", "False", "guarded", "True", "nested", "True", "else", "True",
                                   "inside_try", "True"]


def test_main_is_guarded_without_a_main_script():
    assert main_is_guarded()  # under pytest the run is not at a main script's top level
    done = subprocess.run([sys.executable, "-c", "from elastream.processes.main_guard import main_is_guarded; "
                           "print(main_is_guarded())"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.parametrize("method", METHODS)
def test_an_unguarded_script_is_refused_before_any_worker_starts(tmp_path, method):
    done = run_script(tmp_path, FLOW_SCRIPT + "\nrun()\n", method)
    assert done.returncode != 0
    assert "RESULT" not in done.stdout  # never a normal result
    assert "MainGuardError" in done.stderr
    assert GUARD in done.stderr and '"__mp_main__"' in done.stderr and "script.py (line" in done.stderr
    assert "bootstrapping phase" not in done.stderr  # no worker got as far as re-running the script


def test_the_guard_error_carries_the_hint():
    error = MainGuardError("/home/me/job.py", 12)
    assert isinstance(error, es.ElastreamError) and error.hint == MAIN_GUARD_HINT
    assert GUARD in MAIN_GUARD_HINT and "\n" not in MAIN_GUARD_HINT
    assert "/home/me/job.py (line 12)" in str(error) and GUARD in str(error)


def test_the_same_script_with_the_guard_runs(tmp_path):
    done = run_script(tmp_path, FLOW_SCRIPT + f"\n{GUARD}\n    run()\n", "forkserver")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RESULT", "1000"]


def test_a_packages_main_run_with_dash_m_needs_no_guard(tmp_path):
    package = tmp_path / "job"
    package.mkdir()
    (package / "__main__.py").write_text(FLOW_SCRIPT + "\nrun()\n")  # workers do not re-run a package's __main__
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-m", "job", "forkserver"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RESULT", "1000"]


@pytest.mark.parametrize("method", METHODS)
def test_a_worker_dying_at_start_up_fails_the_run_with_the_hint(tmp_path, method):
    failing_import = f"""
        if __name__ != "__main__":
            raise RuntimeError("this script cannot be imported by a worker")
        {GUARD}
            run()
    """
    done = run_script(tmp_path, FLOW_SCRIPT + textwrap.dedent(failing_import), method)
    assert done.returncode != 0 and "RESULT" not in done.stdout
    report = done.stderr[done.stderr.rindex("WorkerProcessError"):]
    assert "worker process 1" in report and "during its start-up" in report and "exit code 1" in report
    assert "its operators: double" in report and GUARD in report and "__mp_main__" in report
    if method == "forkserver":  # a worker forked from the server leaves its error for the parent
        assert "its last lines on stderr" in report and "cannot be imported by a worker" in report
    else:
        assert "cannot be imported by a worker" in done.stderr  # the worker's own report, before


def test_a_worker_that_exits_without_reporting_its_end_fails_the_run(start_method, children_before):
    def leave(x):
        os._exit(0)  # a clean exit status, but no Done: its outputs are lost

    flow = es.Flow("leaves")
    flow.source(range(100), name="src").map(leave, name="leaver").sink(es.ops.Collect(), name="out")
    with pytest.raises(WorkerProcessError) as info:
        runner(start_method, placement={"src": 0, "leaver": 1, "out": 1}).run(flow, timeout=60)
    assert info.value.exitcode == 0 and info.value.operators == ["leaver", "out"]
    assert "worker process 1" in str(info.value) and "exit code 0" in str(info.value)
    assert_no_worker_left(children_before)


# -- item 5: errors that name the operator ----------------------------------------------------
def _generator():
    yield 1


RESOURCES = {
    "an open file": lambda tmp: open(tmp / "out.txt", "w"),  # noqa: SIM115 - closed by the test
    "a lock": lambda tmp: threading.Lock(),
    "a generator": lambda tmp: _generator(),
}


@pytest.mark.parametrize("what", sorted(RESOURCES))
def test_an_operator_that_cannot_be_pickled_is_named_before_any_worker_starts(tmp_path, start_method, what,
                                                                              children_before):
    resource = RESOURCES[what](tmp_path)
    server = forkserver.fork_server_pid()
    flow = es.Flow("leaky")
    flow.source(range(10), name="src").map(lambda x: (resource, x)[1], name="uses_resource") \
        .sink(es.ops.Collect(), name="out")
    try:
        with pytest.raises(UnpicklableOperatorError) as info:
            runner(start_method, placement={"src": 0, "uses_resource": 1, "out": 0}).run(flow, timeout=60)
    finally:
        getattr(resource, "close", lambda: None)()
    error = info.value
    assert isinstance(error, es.FlowValidationError) and error.operator == "uses_resource"
    message = str(error)
    assert "operator 'uses_resource' (Map) cannot be sent to worker process 1" in message
    assert "closure variable 'resource'" in message and f"is a {type(resource).__name__}" in message
    assert "open()" in message and "inside the function" in message and "placement={'uses_resource': 0" in message
    assert forkserver.fork_server_pid() == server  # not even the fork server was started for it
    assert_no_worker_left(children_before)


def test_the_same_operator_runs_in_process_0():
    lock = threading.Lock()
    flow = es.Flow("kept")
    flow.source(range(10), name="src").map(lambda x: (lock, x)[1], name="uses_lock").sink(es.ops.Collect(), name="out")
    result = runner(placement={"src": 1, "uses_lock": 0, "out": 0}).run(flow, timeout=60)
    assert result.outputs["out"] == list(range(10))


def test_a_placement_naming_an_unknown_operator(children_before):
    with pytest.raises(es.FlowValidationError) as info:
        runner(placement={"nonexistent_op": 1}).run(pipeline(), timeout=60)
    assert info.value.operator == "nonexistent_op"
    assert "'nonexistent_op', which is not in flow 'misuse'" in str(info.value)
    assert "its operators: double, out, src" in str(info.value)
    assert_no_worker_left(children_before)


def test_a_placement_leaving_out_an_operator_or_naming_a_missing_process():
    with pytest.raises(es.FlowValidationError, match=r"gives no process to 'double', 'out'.*its operators"):
        runner(placement={"src": 1}).run(pipeline(), timeout=60)
    with pytest.raises(es.FlowValidationError, match=r"puts 'out' on process 2.*processes 0\.\.1") as info:
        runner(placement={"src": 0, "double": 1, "out": 2}).run(pipeline(), timeout=60)
    assert info.value.operator == "out"


def test_a_plan_made_for_another_flow():
    from elastream.placement import PlacementGraph, place

    other = es.Flow("other")
    other.source(range(3), name="numbers").sink(es.ops.Collect(), name="kept")
    plan = place(PlacementGraph.from_flow(other), 2)
    with pytest.raises(es.FlowValidationError, match=r"which is not in flow 'misuse' \(its operators: double, out, src\)"):
        runner(placement=plan).run(pipeline(), timeout=60)


def test_replicas_naming_an_unknown_operator(children_before):
    with pytest.raises(es.FlowValidationError) as info:
        runner(replicas={"nope": 2}).run(pipeline(), timeout=60)
    assert info.value.operator == "nope"
    assert "'nope', which is not in flow 'misuse'" in str(info.value) and "double, out, src" in str(info.value)
    assert_no_worker_left(children_before)


# -- item 7: statistics during a run ----------------------------------------------------------
def test_stats_during_a_run_list_the_operators_of_every_process(wait_until, children_before):
    flow = es.Flow("endless")
    flow.source(lambda: iter(int, 1), name="src").map(lambda x: x + 1, name="x") \
        .sink(es.ops.Callback(lambda x: None), name="out")
    handle = runner(placement={"src": 0, "x": 1, "out": 1}).start(flow)
    try:
        assert list(handle.stats().operators) == ["src", "x", "out"]  # at once, before process 1 reports
        wait_until(lambda: handle.stats().operators["out"].tuples_in > 0, timeout=30, what="process 1's report")
        stats = handle.stats()
        assert list(stats.operators) == ["src", "x", "out"] and stats.operators["x"].tuples_in > 0
    finally:
        handle.shutdown(timeout=30)
    assert_no_worker_left(children_before)


def test_start_up_error_folders_of_killed_processes_are_removed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, timeout=60)
    dead = tmp_path / f"{forkserver.STARTUP_DIR_PREFIX}{int(ended.stdout)}-abc"
    alive = tmp_path / f"{forkserver.STARTUP_DIR_PREFIX}{os.getpid()}-def"
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "1.err").write_text("Traceback ...")
    forkserver._remove_orphaned_startup_dirs()
    assert not dead.exists() and alive.exists()
