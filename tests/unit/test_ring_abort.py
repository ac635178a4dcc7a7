"""A stream cut short across processes: a producer closes its ring *aborted*, the consumer's process stops."""

from __future__ import annotations

import pytest

import elastream as es
from elastream.ipc import PickleCodec, SharedRing
from elastream.processes.proxies import RingReceiver

pytestmark = pytest.mark.timeout(30)


def test_an_aborted_close_is_seen_by_the_consumer_after_the_data():
    with SharedRing.create(1 << 16) as ring:
        ring.register_producer()
        assert ring.try_write_batch([b"one"])
        ring.close_producer(aborted=True)
        assert ring.aborted and not ring.at_eof  # the data comes first
        assert [p for _, p in ring.try_read(8)] == [b"one"]
        assert ring.at_eof and ring.aborted


def test_a_normal_close_is_not_aborted():
    with SharedRing.create(1 << 16) as ring:
        ring.register_producer()
        ring.close_producer()
        assert ring.at_eof and not ring.aborted


class EndHook(es.FunctionOperator):
    """A sink that records what it got and whether its end-of-input hook ran."""

    def __init__(self):
        super().__init__(inputs=1, outputs=0)
        self.items, self.ended = [], False

    def on_batch(self, items, port):
        self.items += items

    def on_inputs_closed(self):
        self.ended = True

    def result(self):
        return self.items, self.ended


@pytest.mark.parametrize("aborted", [False, True])
def test_a_receiver_stops_its_flow_when_its_ring_was_cut_short(aborted):
    with SharedRing.create(1 << 16) as ring:
        ring.register_producer()
        assert ring.try_write_batch([b"".join(PickleCodec().encode_batch([1, 2, 3]))])
        ring.close_producer(aborted=aborted)
        flow = es.Flow("receive")
        recv = flow.add(RingReceiver(ring.name), name="recv")
        sink = flow.add(EndHook(), name="sink")
        flow.connect(recv.out(0), sink.in_(0))
        result = es.Runner().run(flow, timeout=20)
    items, ended = result.outputs["sink"]
    if aborted:
        assert not ended  # the cut is not the end of the data: no end-of-input hook downstream
    else:
        assert items == [1, 2, 3] and ended
