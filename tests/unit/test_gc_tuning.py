"""The young-generation GC threshold while flows run (elastream.runtime.gc_tuning)."""

from __future__ import annotations

import gc

import pytest

import elastream as es
from elastream.runtime import gc_tuning
from elastream.runtime.config import GC_THRESHOLD_ENV

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def default_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_relax_raises_only_the_young_threshold_and_restore_gives_it_back():
    assert gc_tuning.relax(5_000) is True
    assert gc.get_threshold() == (5_000, 10, 10)
    gc_tuning.restore()
    assert gc.get_threshold() == (700, 10, 10)


def test_the_last_of_overlapping_runs_restores_what_the_first_found():
    assert gc_tuning.relax(5_000)
    assert gc_tuning.relax(9_000)  # a second run joins: the first one's value stays
    assert gc.get_threshold()[0] == 5_000
    gc_tuning.restore()
    assert gc.get_threshold()[0] == 5_000
    gc_tuning.restore()
    assert gc.get_threshold() == (700, 10, 10)
    gc_tuning.restore()  # one too many: harmless
    assert gc.get_threshold() == (700, 10, 10)


def test_none_or_a_lower_threshold_leaves_the_collector_alone():
    assert gc_tuning.relax(None) is False
    assert gc_tuning.relax(500) is False
    assert gc.get_threshold() == (700, 10, 10)


def threshold_probe() -> es.Flow:
    flow = es.Flow("gc-probe")
    (flow.source(range(3), name="src")
         .map(lambda x: gc.get_threshold()[0], name="read")
         .sink(es.ops.Collect(), name="out"))
    return flow


@pytest.mark.parametrize("setting, seen", [("12345", 12_345), ("off", 700)])
def test_a_run_holds_the_threshold_while_it_runs_and_restores_it(monkeypatch, setting, seen):
    monkeypatch.setenv(GC_THRESHOLD_ENV, setting)
    result = es.Runner().run(threshold_probe(), timeout=30)
    assert result.outputs["out"] == [seen] * 3
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.slow
def test_worker_processes_run_with_the_runners_threshold(monkeypatch):
    placement = {"src": 0, "read": 1, "out": 0}
    monkeypatch.setenv(GC_THRESHOLD_ENV, "23456")
    result = es.Runner(processes=2, placement=placement).run(threshold_probe(), timeout=60)
    assert result.outputs["out"] == [23_456] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_a_bad_threshold_setting_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(GC_THRESHOLD_ENV, "-5")
    with pytest.raises(ValueError, match=GC_THRESHOLD_ENV):
        es.Runner()


def test_the_old_runner_option_names_its_new_spelling():
    with pytest.raises(TypeError, match=GC_THRESHOLD_ENV):
        es.Runner(gc_threshold=1000)


def fresh(i: int) -> list:
    """Tuples built at run time (constants in code are untracked already)."""
    return [(i, "a"), (i, [3]), ((i, 2), 3.0), (((i,),),), [i], (None, b"x", i), ({},), ((((i,),),),)]


needs_extension = pytest.mark.skipif(gc_tuning._untrack_atomic is None, reason="built without the C extension")


@needs_extension
def test_tuples_of_atomic_values_are_untracked_and_others_left_alone():
    items = fresh(5)
    assert all(gc.is_tracked(x) for x in items)
    assert gc_tuning.untrack_atomic(items) == 7  # 1 + 2 (nested) + 3 (nested twice) + 1
    assert [gc.is_tracked(x) for x in items] == [False, True, False, False, True, False, True, True]
    assert items == fresh(5)  # values untouched
    assert gc_tuning.untrack_atomic(items) == 0  # nothing left to do


@needs_extension
def test_untracked_results_still_die_and_cycles_through_kept_containers_are_collected():
    import weakref

    class Box:
        pass

    box = Box()
    kept = [(1, 2), (box, 3)]
    gc_tuning.untrack_atomic(kept)
    assert gc.is_tracked(kept[1])  # holds an instance: may be part of a cycle
    box.me = kept  # a cycle through the list and the tuple
    ref = weakref.ref(box)
    del box, kept
    gc.collect()
    assert ref() is None


def test_untrack_atomic_refuses_anything_but_a_list():
    if gc_tuning._untrack_atomic is None:
        assert gc_tuning.untrack_atomic([(1, 2)]) == 0
        return
    with pytest.raises(TypeError, match="list"):
        gc_tuning.untrack_atomic((1, 2))  # type: ignore[arg-type]


@needs_extension
def test_collect_keeps_its_results_untracked():
    flow = es.Flow("kept")
    flow.source(range(1_000), name="src").map(lambda x: (x, str(x)), name="pair").sink(es.ops.Collect(), name="out")
    out = es.Runner().run(flow, timeout=30).outputs["out"]
    assert out == [(x, str(x)) for x in range(1_000)]
    assert not any(gc.is_tracked(t) for t in out)
