"""Inter-process streams: the shared-memory ring (TurboStream §IV) and the codecs that fill it.

Layer: under the process runtime; imports nothing from the engine but
:mod:`elastream.errors`. :class:`SharedRing` carries records between
processes; :class:`PickleCodec` (a :class:`Codec`) turns tuples and batches of
tuples into record payloads.

Example::

    from elastream.ipc import PickleCodec, SharedRing

    codec = PickleCodec()
    with SharedRing.create(1 << 20) as ring:
        ring.register_producer()
        ring.try_write_batch([codec.encode_batch([(1, "a"), (2, "b")])])
        [(target, payload)] = ring.try_read()
        assert codec.decode_batch(payload) == [(1, "a"), (2, "b")]
"""

from elastream.ipc.codec import Codec, CodecError, PickleCodec
from elastream.ipc.ring import RingClosedError, RingStats, SharedRing

__all__ = ["Codec", "CodecError", "PickleCodec", "RingClosedError", "RingStats", "SharedRing"]
