"""The live terminal view: frames of a running flow on its own thread, the plain fallback, the status file."""

from __future__ import annotations

import io
import json
import threading

import pytest
from rich.console import Console

import elastream as es
from elastream.cli.live import THREAD_NAME, LiveView, Sample, describe, render
from elastream.metrics.period import period_between
from elastream.runtime.decisions import Applied, HotKey, Levels, SetReplicas

WAIT_S = 30


def endless_flow() -> es.Flow:
    flow = es.Flow("endless")
    (flow.source(es.ops.FromGenerator(lambda: iter(range(10**12))), name="src").map(lambda x: x * 2, name="double")
         .sink(es.ops.Collect(), name="out"))
    return flow


def view_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def sampled(view_kwargs: dict, handle) -> tuple[LiveView, threading.Event]:
    """A LiveView whose levels source signals each sample, so a test waits for one instead of sleeping."""
    took = threading.Event()

    def levels() -> Levels:
        took.set()
        return Levels(threads=(1,))

    return LiveView(handle, refresh_s=0.05, levels=levels, **view_kwargs), took


def test_renders_frames_of_a_running_flow_and_leaves_no_thread():
    out = io.StringIO()
    handle = es.Runner(threads=1, elastic=False).start(endless_flow())
    try:
        view, took = sampled({"console": Console(file=out, force_terminal=True, width=120), "title": "endless"},
                             handle)
        with view:
            assert took.wait(WAIT_S), "no sample within 30 s"
            assert view_threads() and view.running
        assert not view_threads() and not view.running
    finally:
        handle.shutdown()
    text = out.getvalue()
    assert view.frames >= 1 and view.error is None
    for word in ("endless", "src", "double", "out", "queue (fill)", "back-pressured", "workers", "replicas"):
        assert word in text


def test_stops_its_thread_when_the_body_raises():
    handle = es.Runner(threads=1, elastic=False).start(endless_flow())
    try:
        view, took = sampled({"console": Console(file=io.StringIO(), force_terminal=True)}, handle)
        with pytest.raises(KeyError), view:
            assert took.wait(WAIT_S)
            raise KeyError("body failed")
        assert not view_threads()
    finally:
        handle.shutdown()


def test_off_a_terminal_prints_plain_lines_and_writes_the_status_file(tmp_path):
    out = io.StringIO()
    status = tmp_path / "status.json"
    handle = es.Runner(threads=1, elastic=False).start(endless_flow())
    try:
        view, took = sampled({"console": Console(file=out), "status_path": status, "progress_every_s": 0.0},
                             handle)
        with view:
            assert took.wait(WAIT_S)
    finally:
        handle.shutdown()
    assert not view_threads() and view.frames >= 1
    lines = out.getvalue().splitlines()
    assert lines and all("tuples/s from the sources" in line and "\x1b[" not in line for line in lines)
    polled = json.loads(status.read_text())
    assert set(polled["operators"]) == {"src", "double", "out"} and polled["levels"]["threads"] == [1]


def test_ends_by_itself_once_the_run_has_finished():
    flow = es.Flow("short")
    flow.source(range(500), name="src").sink(es.ops.Collect(), name="out")
    handle = es.Runner(threads=1, elastic=False).start(flow)
    view = LiveView(handle, refresh_s=0.05, console=Console(file=io.StringIO(), force_terminal=True))
    with view:
        handle.wait(WAIT_S)
        assert view.join(WAIT_S)           # the sampler's own exit after the final frame, not stop()
    assert view.frames >= 1


class FailingHandle:
    """A handle whose statistics cannot be read (a run torn down under the view)."""

    finished = threading.Event()

    def stats(self):
        raise RuntimeError("stats gone")


def test_a_failing_sample_stops_the_view_and_says_why():
    out = io.StringIO()
    view = LiveView(FailingHandle(), console=Console(file=out, width=200))
    with view:
        assert view.join(WAIT_S)
    assert isinstance(view.error, RuntimeError) and view.frames == 0
    assert "live view stopped: RuntimeError: stats gone" in out.getvalue()


def test_a_frame_shows_replicas_and_the_latest_decisions():
    flow = es.Flow("keyed")
    (flow.source(range(300), name="src").key_by(lambda x: x % 4, partitions=4)
         .reduce(lambda a, x: a + x, initial=int, name="sum").sink(es.ops.Collect(), name="out"))
    stats = es.Runner(threads=1, elastic=False, replicas={"sum": 2}).start(flow).wait(WAIT_S).stats
    grew = Applied(SetReplicas("sum", 2, reason="write-blocked"), at_s=1.5, ok=True)
    sample = Sample(stats=stats, period=period_between(None, stats), levels=None, decisions=(grew,))
    out = io.StringIO()
    Console(file=out, width=160).print(render(sample, title="keyed"))
    rows = {line.split()[1]: line for line in out.getvalue().splitlines() if line.startswith("│ sum#")}
    assert set(rows) == {"sum#split", "sum#0", "sum#1", "sum#merge"} and all(" 2 " in r for r in rows.values())
    assert describe(grew) == "1.5 s SetReplicas operator=sum count=2: write-blocked"
    assert describe(grew) in out.getvalue()


def test_a_hot_key_reads_as_one_short_line():
    hot = Applied(HotKey("sum", group=3, share=0.8123, reason="more replicas cannot help"), at_s=7.25, ok=True)
    assert describe(hot) == "7.2 s HotKey operator=sum group=3 share=0.812: more replicas cannot help"
