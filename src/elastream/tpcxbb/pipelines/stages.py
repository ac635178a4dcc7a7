"""What the TPCx-BB pipelines share: names, the stream columns, :class:`QueryFlow` and the stage builder.

:class:`Stages` adds the SL / PS / SF stages of spec §5 as fluent declarative
operators (``flat_map``; ``key_by(...).process(...)``; ``process(...)``) and
wraps their functions when latency markers flow
(:mod:`~elastream.tpcxbb.pipelines.markers`). :func:`items_in_categories` is
the static table Q1 and Q3 both read.

Threading: building a flow runs on the caller's thread; nothing here is used
while the flow runs except the functions the stages capture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

import elastream as es
from elastream.graph.fluent import Stream
from elastream.tpcxbb import io
from elastream.tpcxbb.pipelines.markers import flat_map_passing_markers, key_passing_markers, \
    keyed_end_skipping_markers, step_passing_markers

__all__ = ["CATEGORY_PARTITIONS", "DEFAULT_PARTITIONS", "SINK_NAME", "SOURCE_NAME", "STREAM_COLUMNS", "QueryFlow",
           "Stages", "items_in_categories"]

SOURCE_NAME = "stream"
SINK_NAME = "answer"
#: Partitions declared by the keyed stages (the most workers each may get, ordered-multicore §6).
DEFAULT_PARTITIONS = 8
#: Q15 is keyed by category, of which there are 9 (spec §1): more partitions would stay empty.
CATEGORY_PARTITIONS = 9

#: The stream columns each query reads (spec §2 "columns used", §5 step 1).
STREAM_COLUMNS: dict[str, tuple[str, ...]] = {
    "q01": ("ss_sold_date_sk", "ss_sold_time_sk", "ss_item_sk", "ss_store_sk", "ss_ticket_number"),
    "q02": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_item_sk", "wcs_user_sk"),
    "q03": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_item_sk", "wcs_user_sk"),
    "q04": ("wcs_click_date_sk", "wcs_click_time_sk", "wcs_sales_sk", "wcs_web_page_sk", "wcs_user_sk"),
    "q15": ("ss_sold_date_sk", "ss_item_sk", "ss_store_sk", "ss_net_paid"),
}


@dataclass(frozen=True, slots=True)
class QueryFlow:
    """A query's flow and how to read its answer.

    ``flow`` starts with the source ``source_name`` reading ``stream_files``
    (in that order; only ``columns``) and ends in the Collect-like sink
    ``sink_name``; ``finish(outputs)`` turns that sink's collected tuples
    into the §4 answer table.
    """

    query: str
    flow: es.Flow
    source_name: str
    stream_name: str
    stream_files: list[Path]
    columns: tuple[str, ...]
    sink_name: str
    finish: Callable[[list], pa.Table]
    marker_every: int = 0


@dataclass(slots=True)
class Stages:
    """Adds the SL / PS / SF stages of one pipeline; wraps their functions when markers flow."""

    markers: bool
    partitions: int = DEFAULT_PARTITIONS

    def sl(self, stream: Stream, fn: Callable[[Any], Iterable[Any]], name: str) -> Stream:
        """Stateless: ``fn(record) -> outputs`` (filter and project in one step)."""
        return stream.flat_map(flat_map_passing_markers(fn) if self.markers else fn, name=name)

    def ps(self, stream: Stream, key: Callable[[Any], Any], step: Callable[..., Any], state: Callable[[], Any],
           name: str, on_end: Callable[[Any, Any], Iterable[Any]] | None = None,
           partitions: int | None = None) -> Stream:
        """Partitioned stateful, keyed by ``key``."""
        if self.markers:
            key, step, on_end = key_passing_markers(key), step_passing_markers(step), \
                keyed_end_skipping_markers(on_end)
        return stream.key_by(key, partitions=partitions or self.partitions) \
            .process(step, state=state, on_end=on_end, name=name)

    def sf(self, stream: Stream, step: Callable[..., Any], state: Callable[[], Any], name: str,
           on_end: Callable[[Any], Iterable[Any]] | None = None) -> Stream:
        """Stateful: one ordered instance."""
        if self.markers:
            step = step_passing_markers(step)
        return stream.process(step, state=state, kind="stateful", on_end=on_end, name=name)


def items_in_categories(data_dir: Path, categories: tuple[int, ...]) -> frozenset[int]:
    """The items whose ``i_category_id`` is one of ``categories`` (a static table, read once)."""
    t = io.read_table(data_dir, "item", ("i_item_sk", "i_category_id")).to_pydict()
    wanted = set(categories)
    return frozenset(i for i, c in zip(t["i_item_sk"], t["i_category_id"]) if i is not None and c in wanted)
