"""Plain ``Runner()`` moves a held unit whole into its worker process while the flow runs (issue 20).

A stateless unit running through its bypass, asked for its one replica in the worker
process (``SetReplicas(unit, 1, replicas=(1,))``), moves there whole: the ring sender that
fed that replica reads the unit's own input, the replica runs as the operator, and the
ring receiver feeds the unit's consumer (runtime.bypass). No tuple is lost, duplicated or
reordered; the statistics still count the user's operators' tuples; the unit cannot spread
again; and an operator error, a killed worker or a shutdown after the move end the run
cleanly, naming the cause.
"""

from __future__ import annotations

import os
import threading

import pytest

import elastream as es
from elastream.elastic.controller import available_cores
from elastream.runtime.decisions import MOVED_WHOLE, SetReplicas
from test_held_failures import killing_the_worker_fails_the_run_cleanly
from test_process_exits import assert_only_the_fork_server_remains, other_children  # noqa: F401 (autouse fixture)

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(available_cores() < 2, reason="processes are held only on several cores")]

N = 6_000
MOVE = SetReplicas("a+b", 1, reason="test", replicas=(1,))


def gated(n: int, gate: threading.Event, after: int = 500):
    """``i`` for ``i < n``; after the first ``after`` the source waits for ``gate`` (the test's move)."""
    for i in range(n):
        if i == after:
            gate.wait(30.0)
        yield i


def triple_even(e: int) -> bool:
    return e % 2 == 0


def chain_flow(source, fail_at: int | None = None) -> es.Flow:
    """src → map "a" (×3, raising at ``fail_at`` in a worker process) → filter "b" → Collect "out"."""
    parent = os.getpid()

    def a(e: int) -> int:
        if e == fail_at and os.getpid() != parent:
            raise ValueError(f"bad record {e}")
        return e * 3

    flow = es.Flow("held-moves")
    (flow.source(es.ops.FromIterable(source), name="src")
         .map(a, name="a").filter(triple_even, name="b")
         .sink(es.ops.Collect(), name="out"))
    return flow


def moved_run(n: int = N, fail_at: int | None = None):
    """A run whose chain moves whole once 500 tuples went through it in process 0: (handle, the move's answer)."""
    gate = threading.Event()
    handle = es.Runner().start(chain_flow(gated(n, gate), fail_at))
    applied = handle.submit([MOVE])[0]
    gate.set()
    return handle, applied


def test_a_unit_moved_whole_gives_the_sequential_output_and_counts_its_operators():
    handle, applied = moved_run()
    result = handle.wait(timeout=60)
    assert applied.ok and applied.why == MOVED_WHOLE, applied.why
    assert result.outputs["out"] == [e * 3 for e in range(N) if e * 3 % 2 == 0]  # in order, once each
    assert result.timeline.entries[-1].levels.moved == {"a+b": 1}
    ops = result.stats.operators
    assert ops["a"].tuples_in == N and ops["b"].tuples_in == N and ops["b"].tuples_out == N // 2
    assert ops["b"].sent == {"out": N // 2}  # the moved replica's ring is credited to the consumer, not the merge


def test_a_unit_moves_whole_into_the_second_of_two_held_workers(monkeypatch):
    """Three processes (two held workers): the move finds the ring ends of the replica it names by the
    replica they carry, and the unit runs whole in process 2."""
    monkeypatch.setattr("elastream.elastic.held.available_cores", lambda: 3)
    gate = threading.Event()
    handle = es.Runner().start(chain_flow(gated(N, gate)))
    applied = handle.submit([SetReplicas("a+b", 1, reason="test", replicas=(2,))])[0]
    gate.set()
    result = handle.wait(timeout=60)
    assert applied.ok and applied.why == MOVED_WHOLE, applied.why
    assert result.outputs["out"] == [e * 3 for e in range(N) if e * 3 % 2 == 0]
    assert result.timeline.entries[-1].levels.moved == {"a+b": 2}
    assert result.stats.operators["b"].sent == {"out": N // 2}
    parts = handle.part_stats()
    assert len(parts) == 3 and parts[2].operators["a+b#2"].tuples_in > 0


def test_a_unit_moved_whole_cannot_spread_again():
    handle, applied = moved_run(n=N)
    again = handle.submit([SetReplicas("a+b", 2, reason="test")])[0]
    handle.wait(timeout=60)
    assert applied.ok
    assert not again.ok and "cannot spread again" in again.why


def test_a_keyed_unit_asked_for_its_other_replica_alone_goes_through_its_split():
    gate = threading.Event()
    flow = es.Flow("held-keyed-move")
    (flow.source(es.ops.FromIterable(gated(N, gate)), name="src")
         .key_by(lambda e: e % 31)
         .process(lambda count, e: (count + 1, [(e, count + 1)]), state=int, name="x")
         .sink(es.ops.Collect(), name="out"))
    handle = es.Runner().start(flow)
    applied = handle.submit([SetReplicas("x", 1, reason="test", replicas=(1,))])[0]
    gate.set()
    result = handle.wait(timeout=60)
    assert applied.ok and applied.why != MOVED_WHOLE  # its key groups carried their counts to replica 1
    assert result.outputs["out"] == [(e, e // 31 + 1) for e in range(N)]
    assert result.timeline.entries[-1].levels.moved == {}


@pytest.mark.slow
def test_an_operator_error_in_a_moved_unit_names_the_operator():
    handle, applied = moved_run(n=50_000, fail_at=40_000)
    with pytest.raises(es.OperatorError) as info:
        handle.wait(timeout=60)
    assert applied.ok
    assert "'a'" in str(info.value) and "bad record 40000" in str(info.value)
    assert_only_the_fork_server_remains("forkserver")


@pytest.mark.slow
def test_sigkill_of_the_worker_a_unit_moved_to_fails_the_run_cleanly():
    handle = es.Runner().start(chain_flow(iter(int, 1)))  # endless
    assert handle.submit([MOVE])[0].ok
    killing_the_worker_fails_the_run_cleanly(handle)


@pytest.mark.slow
def test_shutdown_while_a_unit_moves_ends_cleanly():
    handle = es.Runner().start(chain_flow(iter(int, 1)))
    answers: list = []
    mover = threading.Thread(target=lambda: answers.extend(handle.submit([MOVE])))
    mover.start()
    result = handle.shutdown(timeout=30)
    mover.join(10)
    assert result.shutdown and not mover.is_alive() and len(answers) == 1
    assert_only_the_fork_server_remains("forkserver")
