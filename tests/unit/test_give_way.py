"""``ctx.give_way()``: an operator with long units of work lets the others of its process run between them.

Stepped on the one-step harness with a manual clock: each unit of work moves the
clock on by UNIT_S, so which operator runs when is exact, not a matter of speed.
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.runtime.clock import ManualClock
from elastream.runtime.harness import SchedulerHarness

pytestmark = pytest.mark.timeout(30)

UNIT_S = 0.02
NAP_S = 0.005


class Units(es.Operator):
    """A source doing ``units`` units of work of UNIT_S each (on ``clock``), giving way after each one when asked."""

    def __init__(self, events: list, units: int, give_way: bool, clock: ManualClock):
        super().__init__(inputs=0, outputs=1)
        self.events, self.units, self.give_way, self.clock = events, units, give_way, clock

    async def process(self, ctx) -> None:
        for i in range(self.units):
            self.clock.advance(UNIT_S)  # the unit of work
            self.events.append(f"unit{i}")
            await ctx.outputs[0].push(i)
            if self.give_way:
                await ctx.give_way()


class Napper(es.Operator):
    """A source that naps NAP_S on a timer, then records that it ran."""

    def __init__(self, events: list):
        super().__init__(inputs=0, outputs=1)
        self.events = events

    async def process(self, ctx) -> None:
        await ctx.sleep(NAP_S)
        self.events.append("napper")
        await ctx.outputs[0].push(-1)


def run(give_way: bool, *, idle_workers: int = 0) -> tuple[list[str], SchedulerHarness]:
    events: list[str] = []
    clock = ManualClock()
    flow = es.Flow("give-way")
    units = flow.source(Units(events, 5, give_way, clock), name="units")
    napper = flow.source(Napper(events), name="napper")
    units.union(napper, name="union").sink(es.ops.Collect(), name="out")
    # A quantum longer than the whole run: only giving way lets the napper in early.
    h = SchedulerHarness(flow, clock=clock, quantum_s=10.0)
    h.sched.idle_workers = idle_workers  # workers parked in acquire count themselves here; the harness has none
    try:
        h.run()
    finally:
        h.close()
    assert sorted(h.outputs()["out"]) == [-1, 0, 1, 2, 3, 4]
    return events, h


def test_a_due_timer_runs_between_two_units_of_an_operator_that_gives_way():
    events, h = run(give_way=True)
    # unit0 gives way to the operators that have not started (the napper starts its nap at 0.02, until
    # 0.025); the timer fires at the next look for work after unit1 (0.04), and the napper, queued behind
    # the units operator (both last ran at 0.02), runs after unit2 instead of after unit4.
    assert events == ["unit0", "unit1", "unit2", "napper", "unit3", "unit4"]
    assert h.tasks["units"].activations == 6  # gave way after each of the five units; the sixth ends it


def test_without_giving_way_the_operator_keeps_its_worker_for_its_quantum():
    events, h = run(give_way=False)
    assert events == ["unit0", "unit1", "unit2", "unit3", "unit4", "napper"]
    assert h.tasks["units"].activations == 1


def test_with_an_idle_worker_at_hand_nobody_gives_way():
    events, h = run(give_way=True, idle_workers=1)
    # give_way is free when another worker could serve the others: the operator keeps going
    assert events[:5] == ["unit0", "unit1", "unit2", "unit3", "unit4"]
    assert h.tasks["units"].activations == 1


def test_with_real_threads_giving_way_delivers_everything(run_flow):
    """The same flow on worker threads (real clock): the content, whatever the timing."""
    events: list[str] = []
    flow = es.Flow("give-way-threads")
    units = flow.source(Units(events, 5, True, ManualClock()), name="units")
    napper = flow.source(Napper(events), name="napper")
    units.union(napper).sink(es.ops.Collect(), name="out")
    result = run_flow(flow, timeout=20, threads=2)
    assert sorted(result.outputs["out"]) == [-1, 0, 1, 2, 3, 4]
    assert sorted(events) == sorted(["napper"] + [f"unit{i}" for i in range(5)])
