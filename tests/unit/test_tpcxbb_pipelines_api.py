"""The TPCx-BB pipelines package keeps the names of the former single module, and its pieces stay small.

Answers are checked against Spark in tests/spark/test_local_queries.py; this
only checks what the split must not change: every public name is importable
from ``elastream.tpcxbb.pipelines``, and marker wrappers leave query functions alone.
"""

from __future__ import annotations

import pytest

import elastream as es
import elastream.tpcxbb.pipelines as pipelines
from elastream.tpcxbb.pipelines import markers, q01, q02, q03, q04, q15

#: The public names of the former ``pipelines.py``.
FORMER_NAMES = [
    "SOURCE_NAME", "SINK_NAME", "DEFAULT_PARTITIONS", "CATEGORY_PARTITIONS", "STREAM_COLUMNS", "QueryFlow",
    "Marker", "MarkingSource", "MarkerCollect", "markers_of", "OTHER_PAGE", "CART_PAGE", "CHECKOUT_PAGE",
    "q01_select", "q01_basket_pairs", "q01_pair_counter", "q01_top_collect", "q01_top_emit", "q02_select",
    "q02_sessionizer", "q02_co_viewed", "count_by_key", "q02_top_collect", "q02_top_emit", "q03_select",
    "q03_last_viewed", "q03_view_counts", "q03_top", "q04_select", "q04_sessionizer", "q04_abandoned_pages",
    "q04_add", "q04_emit", "q04_average", "q15_select", "q15_categorize", "q15_regress", "q15_fit", "build_flow"]


def test_every_former_name_is_importable_from_the_package():
    missing = [name for name in FORMER_NAMES if not hasattr(pipelines, name)]
    assert missing == []
    assert sorted(pipelines.__all__) == sorted(FORMER_NAMES)


@pytest.mark.parametrize("module", [q01, q02, q03, q04, q15])
def test_each_query_module_builds_its_own_chain(module):
    assert pipelines._BUILDERS[module.__name__.rsplit(".", 1)[1]] is module.build


def test_unknown_query_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(KeyError, match="q01, q02, q03, q04, q15"):
        pipelines.build_flow("q99", tmp_path)


def test_markers_pass_through_wrapped_functions_untouched():
    marker = markers.Marker(0, 1.0)
    select = markers.flat_map_passing_markers(lambda r: (r * 2,))
    step = markers.step_passing_markers(lambda n, x: (n + 1, (x,)))
    key = markers.key_passing_markers(lambda x: x % 2)
    end = markers.keyed_end_skipping_markers(lambda k, s: (k, s))
    assert select(marker) == (marker,) and select(3) == (6,)
    assert step(5, marker) == (5, (marker,)) and step(5, 7) == (6, (7,))
    assert key(marker) is markers.Marker and key(3) == 1
    assert end(markers.Marker, 9) == () and end(1, 9) == (1, 9)
    assert markers.without_markers([1, marker, 2]) == [1, 2] and markers.markers_of([1, marker]) == [marker]


def test_a_runs_marking_source_wraps_its_own_inner_source():
    inner = es.ops.FromIterable(range(3))
    source = markers.MarkingSource(inner, every=2)
    twin = source.instantiate()
    assert twin is not source and twin.inner is not inner and type(twin.inner) is type(inner)
    assert twin.every == 2
