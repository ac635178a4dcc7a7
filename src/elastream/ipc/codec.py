"""Codecs: Python objects to ring payloads and back.

Role: what crosses a :class:`~elastream.ipc.ring.SharedRing` is bytes; a
codec turns a tuple (or a batch of tuples) into a list of buffers that the
ring gathers into one record, and turns a payload back into objects.

:class:`PickleCodec`, the default, uses pickle protocol 5 with out-of-band
buffers (``buffer_callback``): the pickle stream holds only the object
structure, while the data of numpy arrays, Arrow arrays and tables (and any
``pickle.PickleBuffer``) is handed to the ring as the original memory, so it
is copied once, straight into shared memory. A top-level ``bytes`` /
``bytearray`` payload skips pickle entirely. Batches of small tuples are one
pickled list per record — that is where throughput comes from (a ring record
and a pickle call cost microseconds; a small tuple inside a list costs tens
of nanoseconds).

Frame: ``u8 magic, u8 kind, u16 0, u32 n`` (n out-of-band buffers), then ``n``
u64 buffer lengths, the pickle stream, and the buffers back to back.

Objects plain pickle refuses (lambdas, local functions and classes) are
pickled with ``cloudpickle`` instead; the output is still read by
``pickle.loads`` (cloudpickle must be importable where it is decoded).
Decoded out-of-band data is a zero-copy view of the payload it came from:
arrays decoded from a ``bytes`` payload are read-only.

Threading: codecs are stateless; any thread may use one instance.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Iterable
from typing import Any, Protocol, Union, runtime_checkable

__all__ = ["Buffer", "Codec", "CodecError", "PickleCodec"]

Buffer = Union[bytes, bytearray, memoryview]

_MAGIC = 0xE5
KIND_OBJECT, KIND_BATCH, KIND_BYTES, KIND_BYTEARRAY = 1, 2, 3, 4
_FRAME = struct.Struct("<BBHI")
_PLAIN = {kind: _FRAME.pack(_MAGIC, kind, 0, 0) for kind in (KIND_OBJECT, KIND_BATCH, KIND_BYTES, KIND_BYTEARRAY)}
_PROTOCOL = 5


class CodecError(ValueError):
    """A payload that is not a frame of this codec (or not of the expected kind)."""


@runtime_checkable
class Codec(Protocol):
    """Objects to payloads (lists of buffers the ring writes back to back) and back."""

    def encode(self, obj: Any) -> list[Buffer]:
        """One object as a list of buffers (their concatenation is the payload)."""
        ...

    def decode(self, data: Buffer) -> Any:
        """The object of one payload."""
        ...

    def encode_batch(self, objs: Iterable[Any]) -> list[Buffer]:
        """Many objects as one payload."""
        ...

    def decode_batch(self, data: Buffer) -> list[Any]:
        """The objects of a payload made by :meth:`encode_batch`, in order."""
        ...


class PickleCodec:
    """Pickle protocol 5 with out-of-band buffers; cloudpickle where plain pickle fails.

    Example::

        codec = PickleCodec()
        payload = b"".join(codec.encode_batch([(1, "a"), (2, "b")]))
        assert codec.decode_batch(payload) == [(1, "a"), (2, "b")]
    """

    def encode(self, obj: Any) -> list[Buffer]:
        """``obj`` as ``[frame header, pickle stream, *out-of-band buffers]``."""
        kind = type(obj)
        if kind is bytes:
            return [_PLAIN[KIND_BYTES], obj]
        if kind is bytearray:
            return [_PLAIN[KIND_BYTEARRAY], obj]
        return _frame(KIND_OBJECT, obj)

    def decode(self, data: Buffer) -> Any:
        """The object of one payload made by :meth:`encode`."""
        kind, value = _unframe(data)
        if kind == KIND_BATCH:
            raise CodecError("payload holds a batch; use decode_batch")
        return value

    def encode_batch(self, objs: Iterable[Any]) -> list[Buffer]:
        """Many objects (e.g. 256 small tuples) as one pickled list."""
        return _frame(KIND_BATCH, objs if type(objs) is list else list(objs))

    def decode_batch(self, data: Buffer) -> list[Any]:
        """The list of objects of one payload made by :meth:`encode_batch`."""
        kind, value = _unframe(data)
        if kind != KIND_BATCH:
            raise CodecError(f"payload holds a single object (frame kind {kind}), not a batch")
        return value


def _frame(kind: int, obj: Any) -> list[Buffer]:
    buffers: list[pickle.PickleBuffer] = []
    try:
        stream = pickle.dumps(obj, protocol=_PROTOCOL, buffer_callback=buffers.append)
    except (pickle.PicklingError, AttributeError, TypeError) as plain_error:
        import cloudpickle

        buffers = []
        try:
            stream = cloudpickle.dumps(obj, protocol=_PROTOCOL, buffer_callback=buffers.append)
        except Exception as error:
            raise TypeError(f"cannot encode {type(obj).__name__} object for another process: {error}") \
                from plain_error
    if not buffers:
        return [_PLAIN[kind], stream]
    raws = [_raw(b) for b in buffers]
    header = _FRAME.pack(_MAGIC, kind, 0, len(raws)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
    return [header, stream, *raws]


def _raw(buffer: pickle.PickleBuffer) -> memoryview:
    try:
        return buffer.raw()
    except BufferError:                       # not contiguous: one extra copy
        return memoryview(bytes(memoryview(buffer).tobytes()))


def _unframe(data: Buffer) -> tuple[int, Any]:
    view = data if type(data) is memoryview else memoryview(data)
    if view.nbytes < _FRAME.size:
        raise CodecError(f"payload of {view.nbytes} bytes is too short for a frame")
    magic, kind, _, count = _FRAME.unpack_from(view)
    if magic != _MAGIC:
        raise CodecError(f"payload does not start with the codec's magic byte (got {magic:#x})")
    if kind == KIND_BYTES:
        return kind, view[_FRAME.size:].tobytes()
    if kind == KIND_BYTEARRAY:
        return kind, bytearray(view[_FRAME.size:])
    if kind not in (KIND_OBJECT, KIND_BATCH):
        raise CodecError(f"unknown frame kind {kind}")
    if count == 0:
        return kind, pickle.loads(view[_FRAME.size:])
    at = _FRAME.size + 8 * count
    lengths = struct.unpack_from(f"<{count}Q", view, _FRAME.size)
    end = view.nbytes - sum(lengths)
    if end < at:
        raise CodecError("payload is shorter than its out-of-band buffers")
    buffers, offset = [], end
    for n in lengths:
        buffers.append(view[offset:offset + n])
        offset += n
    return kind, pickle.loads(view[at:end], buffers=buffers)
