"""Flow builders of ``elastream.workloads``: shapes, counts and measurements (behaviour, not speed)."""

from __future__ import annotations

import pytest

import elastream as es
from elastream.workloads import demo, latency, overhead
from elastream.workloads.measure import (LatencySamples, LatencySink, StampedSource, measure_run, percentile,
                                         summarize)
from elastream.workloads.topologies import TOPOLOGIES, RoundRobinSplit, build_topology

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_round_robin_split_deals_tuples_in_turn(threads):
    flow = es.Flow("rr")
    src = flow.add(es.ops.FromIterable(range(1000)), name="src")
    split = flow.add(RoundRobinSplit(3, batch=7), name="split")
    src >> split
    for k in range(3):
        flow.connect(split.out(k), flow.add(es.ops.Collect(), name=f"out{k}").in_(0))
    result = es.Runner(threads=threads, max_queue_size=16, batch_size=5).run(flow, timeout=30)
    for k in range(3):
        assert result.outputs[f"out{k}"] == list(range(k, 1000, 3))


@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_topologies_have_the_paper_sizes_and_deliver_every_tuple(kind):
    flow, sink = build_topology(kind, n_tuples=1001, cost_us=1, selectivity=1, gil="hold")
    busy = [h for h in flow.operators.values() if isinstance(h.operator, es.ops.Busy)]
    assert len(busy) == (12 if kind in ("chain", "data-parallel") else 63)
    samples = es.Runner(threads=2).run(flow, timeout=60).outputs[sink]
    assert samples.count == 1001
    assert all(lat >= 0 for lat in samples.latencies_s)


def test_selectivity_zero_drops_everything():
    flow, sink = build_topology("tree", n_tuples=500, cost_us=0, selectivity=0, gil="hold", depth=3)
    assert es.Runner().run(flow, timeout=30).outputs[sink].count == 0


def test_unknown_topology_is_rejected():
    with pytest.raises(ValueError, match="unknown topology"):
        build_topology("ring", n_tuples=1, cost_us=1, selectivity=1, gil="hold")


def test_measure_run_with_a_time_budget_stops_an_unbounded_flow():
    flow = es.Flow("endless")
    flow.source(StampedSource(seconds=60), name="src").map(lambda t: t).sink(LatencySink(), name="sink")
    m = measure_run(es.Runner(threads=2), flow, "sink", seconds=0.4, warmup_s=0.1)
    assert m.stopped_early
    assert m.window_s == pytest.approx(0.3, abs=0.1)
    assert m.tuples > 0 and m.latency["p99_ms"] >= m.latency["p50_ms"]


def test_latency_samples_window_keeps_whole_batches():
    s = LatencySamples(latencies_s=[1.0, 2.0, 3.0, 4.0], arrivals=[(10.0, 1), (11.0, 2), (12.0, 1)])
    w = s.window(10.5, 12.0)
    assert w.latencies_s == [2.0, 3.0] and w.count == 2


def test_percentile_and_summary():
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile([1, 2, 3, 4], 99) == 4
    assert summarize(LatencySamples())["p99_ms"] is None
    assert summarize(LatencySamples(latencies_s=[0.001, 0.003]))["mean_ms"] == pytest.approx(2.0)


def test_latency_pipeline_counts_per_key():
    lines = list(latency.raw_lines(300))
    counts: dict[int, int] = {}
    for i, line in enumerate(lines):
        event = latency.parse((float(i), line))
        counts[latency.key_of(event)] = counts.get(latency.key_of(event), 0) + 1
    state, out = 0, []
    for line in lines[:3]:
        state, emitted = latency.count_step(state, latency.parse((0.0, line)))
        out.extend(emitted)
    assert [c for _, _, c in out] == [1, 2, 3]
    assert latency.render((0.5, 7, 3)) == (0.5, "key=07 count=3")
    flow, sink = latency.build_latency_flow(rate=2000, seconds=0.25)
    assert es.Runner(threads=2).run(flow, timeout=30).outputs[sink].count == 500


def test_overhead_loops_and_chain_agree():
    fns = overhead.identity_functions(12)
    assert overhead.nested_loop(1000, fns) == overhead.unrolled_loop(1000, fns) == 1000
    flow, sink = overhead.build_identity_chain(range(1000), fns)
    assert es.Runner(threads=2).run(flow, timeout=30).outputs[sink] == 1000


@pytest.mark.parametrize("threads", [1, 2])
def test_demo_flow_zips_the_two_columns_row_by_row(tmp_path, threads):
    path = demo.write_sensor_csv(tmp_path / "s.csv", rows=700)
    flow, sink = demo.build_demo_flow(path)
    records = es.Runner(threads=threads).run(flow, timeout=30).outputs[sink]
    assert [r["id"] for r in records] == list(range(700))
    assert all(r["aligned"] for r in records)


def test_demo_fallback_reader_matches_fromcsv(tmp_path):
    path = demo.write_sensor_csv(tmp_path / "s.csv", rows=50)
    types = {"id": int, "humidity": float}
    flows = []
    for op in (demo._CsvColumns(path, types=types), demo.csv_source(path, types)):
        flow = es.Flow("read")
        flow.source(op, name="src").sink(es.ops.Collect(), name="out")
        flows.append(es.Runner().run(flow, timeout=30).outputs["out"])
    assert flows[0] == flows[1]
    assert flows[0][1] == {"id": 1, "sensor": "s01", "temperature": "18.7", "humidity": 25.3}
