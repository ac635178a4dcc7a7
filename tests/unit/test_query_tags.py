"""Query tags (Haren's query priority classes) reach every part of a run.

Tags are inherited downstream (an untagged operator takes its nearest tagged upstream's tag);
a run over processes hands each part the tags of its operators, so that a query whose source is
in one process and whose operators are in another keeps its class; and the Runner's elastic
units (which fuse chains into one operator each) stay out of a run under a Haren policy, so the
policy sees every operator and its tag.
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.processes.spec import build_child_flow, cross_edges, split_flow
from elastream.runtime.config import RunConfig

pytestmark = pytest.mark.timeout(60)


def two_queries() -> es.Flow:
    flow = es.Flow("two")
    flow.source(range(200), name="alerts", query="alerts", priority="high") \
        .map(lambda x: x * 2, name="score").collect(name="alarm")
    flow.source(range(200), name="fuel").map(lambda x: x + 1, name="avg").collect(name="dash")
    return flow


def test_untagged_operators_inherit_the_nearest_tag_upstream():
    flow = two_queries()
    assert flow.query_tags == {"alerts": ("alerts", "high")}
    assert flow.inherited_query_tags() == {name: ("alerts", "high") for name in ("alerts", "score", "alarm")}
    assert es.Flow("none").inherited_query_tags() == {}


def test_each_part_of_a_run_over_processes_is_told_the_tags_of_its_operators():
    flow = two_queries()
    assignment = {"alerts": 0, "score": 1, "alarm": 1, "fuel": 0, "avg": 1, "dash": 1}
    rings = {edge: f"ring-{edge}" for edge, *_ in cross_edges(flow, assignment)}
    specs = split_flow(flow, assignment, 2, rings, RunConfig())
    assert specs[0].query_tags == {"alerts": ("alerts", "high")}
    assert specs[1].query_tags == {"score": ("alerts", "high"), "alarm": ("alerts", "high")}
    assert build_child_flow(specs[1]).query_tags == specs[1].query_tags


def test_a_haren_run_with_the_runner_defaults_keeps_every_operator_and_its_tag():
    handle = es.Runner(policy="haren:multiclass").start(two_queries())
    inner = handle.inner
    assert handle.fused == () and sorted(inner.flow.operators) == ["alarm", "alerts", "avg", "dash", "fuel", "score"]
    result = handle.wait(timeout=30)
    assert result.outputs["alarm"] == [2 * x for x in range(200)]
    assert result.outputs["dash"] == [x + 1 for x in range(200)]
    assert inner.policy._tags == {"alerts": ("alerts", "high")}
