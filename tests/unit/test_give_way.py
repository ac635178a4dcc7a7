"""``ctx.give_way()``: an operator with long units of work lets the others of its process run between them."""

from __future__ import annotations

import time

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(30)

UNIT_S = 0.02


class Units(es.Operator):
    """A source doing ``units`` busy units of UNIT_S each, giving way after each one when asked."""

    def __init__(self, events: list, units: int, give_way: bool):
        super().__init__(inputs=0, outputs=1)
        self.events, self.units, self.give_way = events, units, give_way

    async def process(self, ctx) -> None:
        for i in range(self.units):
            end = time.perf_counter() + UNIT_S
            while time.perf_counter() < end:
                pass
            self.events.append(f"unit{i}")
            await ctx.outputs[0].push(i)
            if self.give_way:
                await ctx.give_way()


class Napper(es.Operator):
    """A source that naps 5 ms on a timer, then records that it ran."""

    def __init__(self, events: list):
        super().__init__(inputs=0, outputs=1)
        self.events = events

    async def process(self, ctx) -> None:
        await ctx.sleep(0.005)
        self.events.append("napper")
        await ctx.outputs[0].push(-1)


def run(give_way: bool) -> list[str]:
    events: list[str] = []
    flow = es.Flow("give-way")
    units = flow.source(Units(events, 5, give_way), name="units")
    napper = flow.source(Napper(events), name="napper")
    units.union(napper).sink(es.ops.Collect(), name="out")
    # One worker, a quantum longer than the whole run: only giving way lets the napper in early.
    es.Runner(threads=1, quantum_ms=10_000).run(flow, timeout=20)
    return events


def test_a_due_timer_runs_between_two_units_of_an_operator_that_gives_way():
    events = run(give_way=True)
    assert events.index("napper") <= 2, events  # after unit0 (napper started first) or unit1 (it started second)
    assert events.count("napper") == 1 and len(events) == 6


def test_without_giving_way_the_operator_keeps_its_worker_for_its_quantum():
    assert run(give_way=False)[-1] == "napper"


def test_with_an_idle_worker_at_hand_nobody_gives_way():
    events: list[str] = []
    flow = es.Flow("give-way-2")
    units = flow.source(Units(events, 5, True), name="units")
    napper = flow.source(Napper(events), name="napper")
    units.union(napper).sink(es.ops.Collect(), name="out")
    result = es.Runner(threads=2, quantum_ms=10_000).run(flow, timeout=20)
    # The second worker served the others (giving way after each push would make ~5 activations; a second
    # one is possible only if the idle worker wakes between the two unlocked reads of work_waiting).
    assert result.stats.operators["units"].activations <= 2
    assert sorted(result.outputs["out"]) == [-1, 0, 1, 2, 3, 4]
