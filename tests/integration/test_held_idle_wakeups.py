"""A light flow under plain ``Runner()`` wakes no background thread of part 0 on a timer (issue 20, latency).

While the held workers wait unstarted, the supervisor thread and the poller thread have nothing to do:
the end of the flow and a start request are signalled, and a ring's producer wakes its reader. Their
looks on a timer are a safety net only, and each one takes the GIL from part 0's one worker, which a
latency-bound flow feels. These tests count the looks over a run of a second and a half (at a 0.05 s
safety net there were about 30 of each), and check that the flow still ends with all its outputs.
"""

from __future__ import annotations

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.processes.supervisor import ProcessRunHandle
from elastream.runtime.poller import ExternalPoller

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]

RATE = 200.0
SECONDS = 1.5
#: Looks a run of SECONDS may take: the 0.5 s safety net's (3), the senders' and the end's signals, slack.
MAX_LOOKS = 12


def light_flow() -> es.Flow:
    flow = es.Flow("held-idle")
    (flow.source(es.ops.RateLimited(range(int(RATE * SECONDS)), RATE), name="src")
         .key_by(lambda i: i % 5)
         .process(lambda count, i: (count + 1, [count + 1]), state=int, name="count")
         .sink(es.ops.Collect(), name="out"))
    return flow


def counting(monkeypatch, cls: type, method: str) -> list[int]:
    """Count the calls of ``cls.method`` (any thread) while the test runs."""
    calls = [0]
    original = getattr(cls, method)

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, counted)
    return calls


def run_light() -> None:
    """Run the light flow under plain Runner(): its held workers never start, every tuple arrives."""
    handle = es.Runner(elastic=es.Elastic(period_s=3600.0)).start(light_flow())
    assert isinstance(handle.inner, ProcessRunHandle) and handle.inner._held is not None, "no held workers"
    result = handle.wait(60)
    assert handle.inner.worker_pids[1:] == [], "no decision was made: the held workers never start"
    assert len(result.outputs["out"]) == int(RATE * SECONDS)


def test_the_supervisor_does_not_look_on_a_short_timer_while_held_workers_wait(monkeypatch):
    looks = counting(monkeypatch, ProcessRunHandle, "_start_held")
    run_light()
    assert looks[0] <= MAX_LOOKS, f"{looks[0]} supervisor looks in {SECONDS} s of an idle held flow"


def test_the_poller_sleeps_on_idle_ring_readers_without_re_arming_them_on_a_short_timer(monkeypatch):
    sleeps = counting(monkeypatch, ExternalPoller, "_sleep_on_waiters")
    run_light()
    assert 1 <= sleeps[0] <= MAX_LOOKS, f"{sleeps[0]} poller sleeps on waiters in {SECONDS} s"
