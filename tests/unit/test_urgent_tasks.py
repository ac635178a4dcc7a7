"""An operator that hands work to another process (``urgent``, a ring's sending end) runs ahead of the
policy's pick whenever it is READY: a core in the other process waits for what it sends."""

from __future__ import annotations

import pytest

import elastream as es
from elastream.ordered.link import SplitMergeLink
from elastream.ordered.split import END_CHUNK, OrderedSplit
from elastream.processes.proxies import RingSender
from elastream.runtime.harness import SchedulerHarness


class Hot(es.ops.Map):
    """A Map standing for a ring's sending end (what the scheduler reads is the spec's ``urgent``)."""

    urgent = True


def _flow() -> es.Flow:
    flow = es.Flow("urgent")
    src = flow.source(range(40), name="src")
    src.map(lambda x: x + 1, name="plain").collect(name="a")
    src.then(Hot(lambda x: x * 2), name="hot").collect(name="b")
    return flow


def test_a_ring_sender_is_urgent_and_an_ordinary_operator_is_not():
    assert RingSender("unused-ring").spec().urgent
    assert not es.ops.Map(abs).spec().urgent


@pytest.mark.parametrize("policy", ["least_recently_run", "max_queue", "ibm"])
@pytest.mark.parametrize("seed", range(6))
def test_a_ready_urgent_task_is_always_the_next_one_run(policy, seed):
    with SchedulerHarness(_flow(), policy=policy, seed=seed, batch_size=4, max_queue_size=8) as h:
        steps = 0
        while not h.finished:
            ready = h.ready()
            step = h.step()
            if step is None:
                break
            steps += 1
            if "hot" in ready:
                assert step.task == "hot", f"{step.task} ran while the urgent 'hot' was READY ({ready})"
        assert steps > 10
        assert h.outputs()["b"] == [x * 2 for x in range(40)]
        assert h.outputs()["a"] == [x + 1 for x in range(40)]


def _link(local_backlog: int, remote_backlog: int) -> SplitMergeLink:
    link = SplitMergeLink(2, local=[0])
    for r in (0, 1):
        link.finished(r, 1_000, 1.0)                                # 1 ms a tuple
    link.sent = [1_000 + local_backlog, 1_000 + remote_backlog]
    return link


def test_a_stateless_split_shrinks_its_pieces_once_its_input_has_ended():
    split = OrderedSplit(2, link=_link(0, 0))
    full = split._batch_size(10_000)
    assert full == 80                                             # PIECE_S x 2 replicas / 1 ms
    split._ending = True
    assert split._batch_size(10_000) == full                      # far from the end: as before
    assert split._batch_size(40) == 10                            # half an even share of what is left
    assert split._batch_size(5) == END_CHUNK


def test_once_its_input_has_ended_a_split_feeds_its_local_replica_as_readily_as_the_others():
    split = OrderedSplit(2, link=_link(36, 100))                  # fills: local 36/120, remote 100/200
    [(r, _)] = split._route_stateless(0, [1, 2, 3])
    assert r == 1                                                 # the local one counts LOCAL_BIAS fuller
    split._ending = True
    [(r, _)] = split._route_stateless(1, [1, 2, 3])
    assert r == 0
