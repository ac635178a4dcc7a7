"""``bench models``: its configurations, batch sizes and ratios on fixed numbers, and one tiny real run."""

from __future__ import annotations

import argparse

import pytest

from elastream.bench import models


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    models.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_configurations_cover_the_three_models_static_levels_and_both_schedulers():
    labels = [label for label, _ in models.configurations([1, 2], 8)]
    assert labels == ["manual", "dedicated", "dynamic", "dynamic t1", "dynamic t2", "default t8", "ibm t8"]
    options = dict(models.configurations([1], 8))
    assert options["dynamic"] == {}                       # plain Runner(): what a user writes
    assert options["ibm t8"]["policy"] == "ibm" and options["default t8"]["policy"] == "least_recently_run"


def test_auto_batch_keeps_a_batch_trip_near_50_ms_and_within_the_runner_default():
    args = _args()
    assert models.batch_for("pipeline", 1, args) == 500
    assert 1 <= models.batch_for("pipeline", 1000, args) <= 5     # ~20 µs × 1,000 operators a tuple (measured)
    assert models.batch_for("data-parallel", 1, args) == 512
    assert models.batch_for("pipeline", 100, _args(batch_size="64")) == 64


def test_ratios_per_case_and_none_where_a_side_measured_nothing():
    rows = [{"shape": "pipeline", "gil": "hold", "flops": 1.0, "config": c, "tuples_per_s": v}
            for c, v in (("manual", 100.0), ("dedicated", 0.0), ("dynamic", 95.0), ("default t8", 50.0),
                         ("ibm t8", 60.0))]
    (r,) = models.ratios(rows)
    assert r["dynamic_over_manual"] == pytest.approx(0.95)
    assert r["dynamic_over_dedicated"] is None
    assert r["ibm_over_default"] == pytest.approx(1.2)


@pytest.mark.timeout(120)
def test_a_short_real_run_measures_every_configuration(tmp_path):
    args = _args(shapes=["pipeline"], flops=[1.0], seconds=1.5, window=0.5, threads=[2], ibm_threads=2,
                 configs=["manual", "ibm t2"], plot=str(tmp_path / "m.png"))
    result = models.run(args)
    rows = {r["config"]: r for r in result["results"]}
    assert set(rows) == {"manual", "ibm t2"}
    assert rows["manual"]["tuples_per_s"] > 0                 # one fused thread fills at once
    assert (tmp_path / "m.png").stat().st_size > 0


def test_the_c_stream_shape_is_twelve_busy_operators_side_by_side_and_not_run_by_default():
    build, costs = models.SHAPES["c-stream-data-parallel"]
    flow, sink = build(n_tuples=10, seconds=None, flops=1, gil="release")
    busy = [name for name in flow.operators if name.startswith("busy_")]
    assert len(busy) == models.CSTREAM_WIDTH == 12 and sink in flow.operators
    assert models.DEPTH["c-stream-data-parallel"] == 1 and costs == (1, 10_000)
    assert "c-stream-data-parallel" not in _args().shapes
    assert _args().repeats == 1
