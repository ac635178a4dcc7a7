"""``elastream bench elastic``'s measurement: a phase's steady rate is the lower of the sink's and the source's.

The first record below is the situation that made the static row "t=1 p=2 replicas=2" of
cstream-fig10 report about 47,000 tuples/s in phase 1, where two 60 µs operators allow
at most about 16,700: the sink's path fell behind (its process's one thread busy with
replicas), finished tuples piled up ahead of the sink, and phase 1's tuples reached the
sink in a burst while the source was already in phase 2. Scaled down: the flow can take
300 tuples/s in phase 1 and the sink still sees them arrive about twice as fast.
"""

from __future__ import annotations

from array import array

import pytest

from elastream.bench._elastic_flows import PhaseRecord, PhaseSink
from elastream.bench._elastic_measure import (phase_emissions, phase_windows, source_windows, steady_rate,
                                              steady_rates)
from elastream.bench.elastic import backlog_notes, measure_phases

#: Tuples per second the scaled-down flow can take in phase 1 (the source emits at that pace).
PHASE1_CAPACITY = 300


def _record(batches: list[tuple[float, int, int, float]], source_end: float | None = None) -> PhaseRecord:
    """A sink's record from batches (emission instant, phase, tuples, arrival instant) in arrival order."""
    seqs, phases, emitted, arrivals = array("q"), array("b"), array("d"), []
    for emit_t, phase, n, arrive_t in batches:
        seqs.extend(range(len(seqs), len(seqs) + n))
        phases.extend([phase] * n)
        emitted.extend([emit_t] * n)
        arrivals.append((arrive_t, n))
    end = max(emitted) if source_end is None else source_end
    return PhaseRecord(seqs, phases, arrivals, end, emitted)


def _emissions(phase: int, per_batch: int) -> list[tuple[float, int, int]]:
    """Ten source batches of one 1-second phase, 0.1 s apart."""
    return [(round(phase + 0.05 + 0.1 * i, 2), phase, per_batch) for i in range(10)]


def _lagging_sink_record() -> PhaseRecord:
    """Phase 0 fills a backlog ahead of the sink, phase 1 reaches the sink in a burst during phase 2."""
    phase0 = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 1.3, 1.7, 2.1]  # on time, then a trickle
    phase1 = [round(2.21 + 0.02 * i, 2) for i in range(10)]  # all ten batches within 0.2 s
    phase2 = [2.5, 2.6, 2.7, 2.8, 2.9, 3.0, 3.1, 3.2, 3.3, 3.4]  # the last five after the source stopped
    arrivals = phase0 + phase1 + phase2
    emitted = _emissions(0, 100) + _emissions(1, PHASE1_CAPACITY // 10) + _emissions(2, 100)
    return _record([(e, p, n, a) for (e, p, n), a in zip(emitted, arrivals)])


def test_a_burst_released_at_the_sink_counts_at_the_source_rate():
    record = _lagging_sink_record()
    w0, w1, w2 = phase_windows(record)
    assert (w1.begin, w1.end) == (2.21, 2.5)  # phase 1 at the sink: 0.29 s for a phase that lasted 1 s
    rate = steady_rates(record, w1, skip_s=0.15)
    # The source: emissions 1.25 … 1.95 from 1.05 + 0.15 to phase 2's first emission at 2.05.
    assert rate.source_tuples_per_s == pytest.approx(240 / 0.85)
    # The sink: those tuples arrive 2.25 … 2.39, 210 after the first in 0.14 s, far above what the flow can take.
    assert rate.sink_tuples_per_s == pytest.approx(210 / 0.14) and rate.sink_tuples_per_s > PHASE1_CAPACITY
    # (The earlier definition: arrivals 2.37, 2.39 after the sink window's 2.21 + 0.15.)
    assert rate.sink_window_tuples_per_s == pytest.approx(60 / 0.14)
    assert rate.tuples_per_s == rate.source_tuples_per_s <= PHASE1_CAPACITY
    assert rate.seconds == pytest.approx(0.85)
    assert steady_rate(record, w1, skip_s=0.15) == (rate.tuples_per_s, rate.seconds)


def test_a_backlog_filling_ahead_of_the_sink_counts_at_the_sink_rate():
    record = _lagging_sink_record()
    w0 = phase_windows(record)[0]
    rate = steady_rates(record, w0, skip_s=0.15)
    # The source: emissions 0.25 … 0.95 in [0.05 + 0.15, 1.05), pushed into the growing backlog.
    assert rate.source_tuples_per_s == pytest.approx(800 / 0.85)
    # The sink: the same tuples arrive 0.3 … 2.1, 700 after the first in 1.8 s.
    assert rate.sink_tuples_per_s == pytest.approx(700 / 1.8)
    assert rate.tuples_per_s == rate.sink_tuples_per_s and rate.seconds == pytest.approx(1.8)


def test_a_steady_pipeline_measures_the_same_rate_at_both_ends():
    # 200 batches per 1-second phase, 5 ms apart, each reaching the sink 0.3 s after the source made it.
    emitted = [(0.0025 + 0.005 * i, i // 200, 10 if i // 200 != 1 else 3) for i in range(600)]
    record = _record([(e, p, n, e + 0.3) for e, p, n in emitted])
    for window in phase_windows(record)[:2]:
        rate = steady_rates(record, window, skip_s=0.15, tail_s=0.15)
        assert rate.sink_tuples_per_s == pytest.approx(rate.source_tuples_per_s, rel=0.01)
        assert rate.tuples_per_s == pytest.approx(rate.sink_tuples_per_s, rel=0.01)
        assert rate.tuples_per_s == pytest.approx(2000 if window.phase != 1 else 600, rel=0.01)


def _trickling_end_record() -> PhaseRecord:
    """Phase 0 reaches the sink on time, then its last three batches trickle in behind phase 1's first."""
    phase0 = [round(0.1 + 0.1 * i, 2) for i in range(7)] + [1.0, 1.3, 1.6]
    phase1 = [round(1.65 + 0.1 * i, 2) for i in range(10)]
    emitted = _emissions(0, 100) + _emissions(1, 100)
    return _record([(e, p, n, a) for (e, p, n), a in zip(emitted, phase0 + phase1)])


def test_a_tail_ahead_of_the_next_phase_is_left_out_at_both_ends():
    record = _trickling_end_record()
    w0 = phase_windows(record)[0]
    assert (w0.begin, w0.end) == (0.1, 1.65)
    whole = steady_rates(record, w0, skip_s=0.15)
    cut = steady_rates(record, w0, skip_s=0.15, tail_s=0.5)
    # The source: emissions 0.25 … 0.45 in [0.2, 0.55): its window (0.05, 1.05) less the skip and the tail.
    assert cut.source_tuples_per_s == pytest.approx(300 / 0.35)
    # The sink: the same tuples arrive on time, 0.3 … 0.5; without the tail, 0.3 … 1.6 with the trickle.
    assert cut.sink_tuples_per_s == pytest.approx(200 / 0.2) and whole.sink_tuples_per_s == pytest.approx(700 / 1.3)
    assert cut.tuples_per_s == cut.source_tuples_per_s > whole.tuples_per_s == whole.sink_tuples_per_s
    # The earlier definition cut the sink window (0.1, 1.65) by the same 0.5 s, and a trickle 0.6 s longer than
    # the flow's on-time latency kept arrival 1.0 in (0.25, 1.15]: the phase read below its steady pace.
    assert cut.sink_window_tuples_per_s == pytest.approx(600 / 0.9) and cut.sink_window_tuples_per_s < cut.tuples_per_s


def test_a_tail_leaving_too_little_measures_the_second_half():
    w0 = phase_windows(_trickling_end_record())[0]
    rate = steady_rates(_trickling_end_record(), w0, skip_s=0.6, tail_s=0.8)
    # Skip and tail leave 0.15 s of the source window (0.05, 1.05), under a fifth: its second half, emissions
    # 0.55 … 0.95, whose tuples reach the sink 0.6 … 1.6 (the lower rate, 400 tuples after the first in 1 s).
    assert rate.source_tuples_per_s == pytest.approx(500 / 0.5)
    assert rate.tuples_per_s == rate.sink_tuples_per_s == pytest.approx(400 / 1.0) and rate.seconds == 1.0


def test_measure_phases_cuts_a_tail_from_every_phase_but_the_last():
    rows = measure_phases(_lagging_sink_record(), None, ended=4.0, phase_s=1.0, elastic=False)
    assert [r["tail_s"] for r in rows] == [pytest.approx(1 / 3), pytest.approx(1 / 3), 0.0]
    # Phase 0: the source's emissions 0.45 … 0.65 in [0.05 + 1/3, 1.05 - 1/3) reach the sink 0.5, 0.6, 0.9.
    assert rows[0]["source_tuples_per_s"] == pytest.approx(300 / (1 - 2 / 3))
    assert rows[0]["steady_tuples_per_s"] == rows[0]["sink_tuples_per_s"] == pytest.approx(200 / 0.4)
    # The earlier definitions: the sink window's arrivals from 0.1 + 1/3, 0.5 … 2.1 up to 2.21 (with the tail)
    # or 0.5 … 1.7 up to 2.21 - 1/3.
    assert rows[0]["with_tail_tuples_per_s"] == pytest.approx(600 / (2.21 - 0.1 - 1 / 3))
    assert rows[0]["sink_window_tuples_per_s"] == pytest.approx(500 / (2.21 - 1 / 3 - 0.1 - 1 / 3))


def test_source_windows_run_from_a_phase_first_emission_to_the_next_one():
    windows = source_windows(phase_emissions(_lagging_sink_record()))
    assert [(w.phase, w.begin, w.end, w.tuples) for w in windows.values()] == [
        (0, 0.05, 1.05, 1000), (1, 1.05, 2.05, 300), (2, 2.05, 2.95, 1000)]


def test_a_record_without_emission_instants_is_measured_at_the_sink_only():
    record = PhaseRecord(array("q", range(20)), array("b", [0] * 20), [(0.1 * i, 2) for i in range(1, 11)], 9.0)
    assert phase_emissions(record) == {}
    [window] = phase_windows(record)
    rate = steady_rates(record, window, skip_s=0.25)
    assert rate.source_tuples_per_s is None and rate.tuples_per_s == rate.sink_tuples_per_s
    assert rate.sink_tuples_per_s == pytest.approx(14 / 0.65)  # arrivals 0.4 … 1.0 after 0.1 + 0.25


def test_measure_phases_keeps_both_ends_and_counts_the_lower():
    rows = measure_phases(_lagging_sink_record(), None, ended=4.0, phase_s=1.0, elastic=False)
    assert [r["phase"] for r in rows] == [0, 1, 2]
    phase1 = rows[1]
    # Static skip and tail: a third of the phase each; emissions 1.45 … 1.65 reach the sink 2.29 … 2.33.
    assert phase1["source_tuples_per_s"] == pytest.approx(90 / (1.0 - 2 / 3))
    assert phase1["sink_tuples_per_s"] == pytest.approx(60 / 0.04) and phase1["sink_tuples_per_s"] > PHASE1_CAPACITY
    assert phase1["steady_tuples_per_s"] == phase1["source_tuples_per_s"] <= PHASE1_CAPACITY


def test_backlog_notes_name_the_phases_whose_two_ends_disagree():
    runs = [{"config": "static t=1 p=2 replicas=2", "repeat": 1, "phases": [
        {"phase": 0, "sink_tuples_per_s": 22121.8, "source_tuples_per_s": 47712.0},
        {"phase": 1, "sink_tuples_per_s": 47037.2, "source_tuples_per_s": 16874.0},
        {"phase": 2, "sink_tuples_per_s": 40000.0, "source_tuples_per_s": 41000.0},
        {"phase": 3, "sink_tuples_per_s": 40000.0, "source_tuples_per_s": None}]}]
    assert backlog_notes(runs) == [
        "static t=1 p=2 replicas=2 (repeat 2), phase 0: the sink received 22,122 tuples/s, the source emitted "
        "47,712/s (a backlog filled; the lower counted)",
        "static t=1 p=2 replicas=2 (repeat 2), phase 1: the sink received 47,037 tuples/s, the source emitted "
        "16,874/s (a backlog drained; the lower counted)"]


def test_the_sink_records_every_tuple_emission_instant():
    sink = PhaseSink()
    sink.open(None)
    sink.on_batch([(0, 0, 1.5), (1, 0, 1.5), (2, 1, 2.5)], 0)
    sink.on_batch([(3, 1, 2.0)], 0)
    record = sink.result()
    assert list(record.emitted) == [1.5, 1.5, 2.5, 2.0] and record.source_end == 2.5
    assert list(record.seqs) == [0, 1, 2, 3] and list(record.phases) == [0, 0, 1, 1]
