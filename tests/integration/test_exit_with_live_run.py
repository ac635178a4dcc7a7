"""A script that exits while a multi-process run is still going exits normally and leaves nothing behind.

Before the exit hook of :mod:`elastream.processes.live_runs`, part 0's daemon
threads were still inside the shared-memory ring code when the interpreter
tore down, and the script died of SIGSEGV (-11) instead of its own exit code.
Each case runs a fresh interpreter a few times, since it was a race: its exit
code is Python's own, no ring segment it created is left in /dev/shm, none of
its worker processes (nor its fork server) is still alive, and the resource
tracker found no leaked segment to clean up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from ring_segments_check import SHM, ring_segments

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

REPEATS = 3

SCRIPT = textwrap.dedent("""
    import itertools, sys, time
    import elastream as es
    from elastream.processes import forkserver

    def inc(x):
        return x + 1

    if __name__ == "__main__":
        how, runner = sys.argv[1], sys.argv[2]
        flow = es.Flow("exit-live")
        (flow.source(itertools.count(), name="src").map(inc, name="a")
             .filter(lambda x: x % 2, name="b").sink(es.ops.Callback(lambda x: None), name="out"))
        if runner == "elastic":
            handle = es.Runner(processes=2).start(flow)
        else:  # the stream crosses the rings both ways
            handle = es.Runner(processes=2, elastic=False, placement={"src": 0, "a": 1, "b": 0, "out": 0}).start(flow)
        deadline = time.monotonic() + 30
        while handle.stats().operators["out"].tuples_in < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)  # until tuples cross the rings: part 0's threads are inside the ring code
        print(*[p for p in handle.worker_pids[1:]], forkserver.fork_server_pid(), flush=True)
        if how == "exit":
            sys.exit(0)
        if how == "interrupt":
            raise KeyboardInterrupt
        # "fall": off the end of the script
""")

#: Exit codes Python gives each way out (an uncaught KeyboardInterrupt kills the process with SIGINT).
EXPECTED = {"exit": {0}, "fall": {0}, "interrupt": {-signal.SIGINT, 128 + signal.SIGINT}}


def segments_created_by(pid: int) -> list[str]:
    """Ring segments in /dev/shm whose header names ``pid`` as their creator (other sessions make rings too)."""
    import struct

    mine = []
    for name in ring_segments():
        try:
            with open(os.path.join(SHM, name), "rb") as f:
                header = f.read(80)
        except OSError:
            continue  # unlinked meanwhile
        if len(header) == 80 and struct.unpack_from("<Q", header, 64)[0] == pid:
            mine.append(name)
    return mine


def still_running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that are alive after a short grace (a zombie has ended: it is not running)."""
    deadline = time.monotonic() + 3.0
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.mark.parametrize("how,runner", [("exit", "plain"), ("fall", "plain"), ("interrupt", "plain"),
                                        ("exit", "elastic")])
def test_exiting_with_a_live_run_exits_normally_and_cleans_up(tmp_path, how, runner):
    script = tmp_path / "exit_live.py"
    script.write_text(SCRIPT)
    # The attempts run side by side: the test takes the time of one, and the machine is busier (a race).
    procs = [subprocess.Popen([sys.executable, str(script), how, runner], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path) for _ in range(REPEATS)]
    for attempt, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()  # only if still running after the timeout (then the test fails anyway)
        where = f"attempt {attempt}: rc={proc.returncode}\nstdout: {out}\nstderr: {err[-2000:]}"
        assert proc.returncode in EXPECTED[how], where
        pids = [int(p) for p in out.split() if p.isdigit()]
        assert pids, where  # the run had started its worker
        assert still_running(pids) == [], where
        assert segments_created_by(proc.pid) == [], where
        assert "leaked shared_memory" not in err, where
