"""The run timeline (entries from period snapshots, JSON round trip, PNG) and the status JSON of a run."""

from __future__ import annotations

import json
import threading

from pytest import approx

import elastream as es
from elastream.metrics.period import OperatorPeriod, PeriodStats, WorkerPeriod
from elastream.metrics.status import replica_counts, status_json, write_json_atomic
from elastream.metrics.timeline import Timeline, level_series
from elastream.runtime.decisions import Applied, Fuse, HotKey, Levels, MoveKeyGroups, SetReplicas, SetThreads

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def op_period(name: str, kind: str, tuples_in: int, tuples_out: int, write_blocked_s: float = 0.0) -> OperatorPeriod:
    return OperatorPeriod(name=name, kind=kind, tuples_in=tuples_in, tuples_out=tuples_out, busy_s=0.5, cpu_s=0.4,
                          read_blocked_s=0.0, write_blocked_s=write_blocked_s, queue_length=0,
                          write_blocked_ratio=0.0)


def period(start_s: float, emitted: int, blocked_s: float = 0.0, span: float = 2.0) -> PeriodStats:
    ops = {"src": op_period("src", "source", 0, emitted, write_blocked_s=blocked_s),
           "work": op_period("work", "stateless", emitted, emitted),
           "out": op_period("out", "sink", emitted, 0)}
    workers = (WorkerPeriod(0, busy_s=1.0, cpu_s=1.0, utilisation=0.5),
               WorkerPeriod(1, busy_s=2.0, cpu_s=1.0, utilisation=1.0))
    return PeriodStats(start_s=start_s, period_s=span, operators=ops, workers=workers)


def sample_timeline() -> Timeline:
    timeline = Timeline()
    timeline.record(period(0.0, 1000), Levels(threads=(1,)))
    grow = Applied(SetReplicas("work", 3, reason="write-blocked 0.4 > τ"), at_s=4.0, ok=True)
    move = Applied(MoveKeyGroups("work", (1, 5), target=2, reason="balance"), at_s=4.0, ok=False, why="no state")
    timeline.record(period(2.0, 3000, blocked_s=0.8), Levels(threads=(2,), replicas={"work": 3}), (grow, move),
                    pause_ms=12.5)
    more = Applied(SetThreads(2, process=1, reason="second process"), at_s=6.0, ok=True)
    timeline.record(period(4.0, 5000), Levels(threads=(2, 2), replicas={"work": 3}), (more,))
    return timeline


def test_an_entry_holds_the_periods_throughput_utilisation_and_back_pressure():
    entry = sample_timeline().entries[1]
    assert entry.at_s == 4.0 and entry.period_s == 2.0
    assert entry.throughput == approx(1500.0)          # only what left the source, per second
    assert entry.utilisation == approx(0.75)           # mean busy fraction of the two workers
    assert entry.write_blocked == {"src": approx(0.4), "work": 0.0, "out": 0.0}
    assert entry.pause_ms == 12.5 and [type(a.decision) for a in entry.decisions] == [SetReplicas, MoveKeyGroups]


def test_the_timeline_round_trips_through_json():
    timeline = sample_timeline()
    data = json.loads(json.dumps(timeline.to_json()))
    assert data == timeline.to_json()
    decision = data["entries"][1]["decisions"][1]
    assert decision == {"type": "MoveKeyGroups", "fields": {"operator": "work", "groups": [1, 5], "target": 2},
                        "reason": "balance", "at_s": 4.0, "ok": False, "why": "no state",
                        "pause_ms": None}
    assert data["entries"][2]["levels"] == {"threads": [2, 2], "processes": 2, "held_processes": 0,
                                          "replicas": {"work": 3}, "fused": [], "moved": {}}
    assert Timeline.from_json(data).entries == timeline.entries


def test_fusion_and_a_named_hot_key_round_trip_too():
    timeline = Timeline()
    fuse = Applied(Fuse(("parse", "clean"), reason="stateless chain"), at_s=2.0, ok=True)
    hot = Applied(HotKey("sum", group=3, share=0.8, reason="one key group carries 80 %"), at_s=2.0, ok=True)
    timeline.record(period(0.0, 100), Levels(fused=(("parse", "clean"),)), (fuse, hot))
    data = json.loads(json.dumps(timeline.to_json()))
    assert data["entries"][0]["decisions"][1]["fields"] == {"operator": "sum", "group": 3, "share": 0.8}
    assert Timeline.from_json(data).entries == timeline.entries


def test_a_unit_moved_whole_round_trips_and_counts_its_process_as_working():
    timeline = Timeline()
    levels = Levels(threads=(1, 1), replicas={"a": 1, "b": 1}, held=True, moved={"b": 1})
    timeline.record(period(0.0, 100), levels, ())
    data = json.loads(json.dumps(timeline.to_json()))
    assert data["entries"][0]["levels"]["moved"] == {"b": 1} and data["entries"][0]["levels"]["processes"] == 2
    assert Timeline.from_json(data).entries[0].levels.moved == {"b": 1}


def test_save_json_writes_the_file(tmp_path):
    path = sample_timeline().save_json(tmp_path / "runs" / "timeline.json")
    assert json.loads(path.read_text())["entries"][0]["throughput"] == approx(500.0)
    assert [p.name for p in path.parent.iterdir()] == ["timeline.json"]     # no temporary file left


def test_the_levels_panel_has_a_line_per_process_and_replicated_operator():
    series = level_series(sample_timeline().entries)
    assert series == {"threads, process 0": [1, 2, 2], "threads, process 1": [None, None, 2], "processes": [1, 1, 2],
                      "replicas work": [1, 3, 3]}


def test_the_levels_panel_counts_the_units_moved_whole():
    timeline = Timeline()
    held = Levels(threads=(1, 1), replicas={"a": 1, "b": 1}, held=True)
    timeline.record(period(0.0, 1000), held)
    timeline.record(period(1.0, 2000), Levels(threads=(1, 1), replicas={"a": 1, "b": 1}, held=True, moved={"a": 1}))
    series = level_series(timeline.entries)
    assert series["units moved whole"] == [0, 1] and series["processes"] == [1, 2]


def test_plot_writes_a_png(tmp_path):
    path = sample_timeline().plot(tmp_path / "timeline.png", title="three periods")
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5_000
    empty = Timeline().plot(tmp_path / "empty.png")
    assert empty.read_bytes().startswith(PNG_MAGIC)


def test_appends_from_a_listener_thread_while_reading():
    timeline = Timeline()

    def listener():
        for i in range(200):
            timeline.record(period(2.0 * i, 100), Levels())

    writer = threading.Thread(target=listener)
    writer.start()
    seen = [len(timeline.to_json()["entries"]) for _ in range(50)]
    writer.join()
    assert seen == sorted(seen) and len(timeline) == 200


def test_status_json_lists_every_operator_of_a_real_run():
    flow = es.Flow("status")
    (flow.source(range(2_000), name="src").map(lambda x: x + 1, name="inc")
         .key_by(lambda x: x % 8, partitions=8).reduce(lambda a, x: a + x, initial=int, name="sum")
         .sink(es.ops.Collect(), name="out"))
    result = es.Runner(threads=1, elastic=False, replicas={"sum": 2}).start(flow).wait(30)
    status = json.loads(json.dumps(status_json(result.stats)))
    assert set(status["operators"]) == set(result.stats.operators)
    assert {"src", "inc", "sum#0", "sum#1", "out"} <= set(status["operators"])
    assert status["totals"]["tuples_from_sources"] == 2_000 and status["totals"]["tuples_into_sinks"] == 2_000
    assert status["replicas"] == {"sum": 2} and status["operators"]["sum#1"]["replica_of"] == "sum"
    inc = status["operators"]["inc"]
    assert (inc["tuples_in"], inc["tuples_out"], inc["replicas"]) == (2_000, 2_000, 1)
    assert inc["queue"]["capacity"] > 0 and 0.0 <= inc["queue"]["fill"] <= 1.0
    assert {"busy_s", "write_blocked_s", "workers"} <= set(inc)
    assert status["elapsed_s"] > 0 and status["levels"] is None


def test_levels_given_override_the_replicas_counted_from_names(tmp_path):
    stats = es.Runner(threads=1, elastic=False).start(_tiny_flow()).wait(30).stats
    levels = Levels(threads=(2,), replicas={"inc": 4})
    assert replica_counts(stats) == {}
    status = status_json(stats, levels)
    assert status["operators"]["inc"]["replicas"] == 4 and status["levels"]["threads"] == [2]
    path = write_json_atomic(tmp_path / "status.json", status)
    assert json.loads(path.read_text()) == status


def _tiny_flow() -> es.Flow:
    flow = es.Flow("tiny")
    flow.source(range(100), name="src").map(lambda x: x, name="inc").sink(es.ops.Collect(), name="out")
    return flow
