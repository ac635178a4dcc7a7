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

Lists of flat numeric tuples — ``(int, int)`` keyed pairs, rows of floats — are
the bulk of what a replicated operator's split and merge send, and pickle spends
~130 ns writing and ~150 ns reading each such tuple. With the C extension
``_rowsfast`` built, :meth:`PickleCodec.encode_batch` packs every list of at least
:data:`ROWS_MIN` of them, be it the batch itself or a list field of a tuple in it,
into one block of 8-byte values that travels as an out-of-band buffer: ~14 ns a
tuple to write, and reading it back creates only the tuples and their numbers.
Only exact tuples of one arity whose columns hold exact ints within 64 bits or
exact floats qualify (a bool, a bigger int, a tuple subclass keep pickle), so
what is decoded equals what was encoded, types included. Unlike pickle, a
packed list referenced twice in one batch arrives as two equal lists (batches
share no objects with each other either).

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

try:
    from elastream.ipc import _rowsfast
except ImportError:  # built without a C compiler: batches are pickled as they are
    _rowsfast = None

__all__ = ["Buffer", "Codec", "CodecError", "PickleCodec"]

#: Shorter lists of rows stay in the pickle stream: a packed block costs a reduce call and a buffer.
ROWS_MIN = 32
#: The packed layout (``_rowsfast.c``): u32 rows, u8 arity, 3 zero bytes, 16 column codes, then the values.
_ROWS_HEAD = struct.Struct("=IB3x16s")

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
        """Many objects (e.g. 256 small tuples) as one pickled list; lists of flat numeric tuples packed."""
        batch = objs if type(objs) is list else list(objs)
        if _rowsfast is not None:
            rows = _rowsfast.pack_rows(batch, ROWS_MIN)
            if rows is not None:
                return _frame(KIND_BATCH, _PackedRows(rows))
            batch = _rowsfast.pack_fields(batch, ROWS_MIN, _PackedRows) or batch
        return _frame(KIND_BATCH, batch)

    def decode_batch(self, data: Buffer) -> list[Any]:
        """The list of objects of one payload made by :meth:`encode_batch`."""
        kind, value = _unframe(data)
        if kind != KIND_BATCH:
            raise CodecError(f"payload holds a single object (frame kind {kind}), not a batch")
        return value


class _PackedRows:
    """A packed list of rows on its way through pickle: it travels as an out-of-band buffer and is
    read back by :func:`_unpack_rows` into the list it was."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return _unpack_rows, (pickle.PickleBuffer(self.data),)


def _unpack_rows(data: Buffer) -> list[tuple]:
    """The list of tuples of a block packed by ``_rowsfast.pack_rows`` (in Python without the extension)."""
    if _rowsfast is not None:
        return _rowsfast.unpack_rows(data)
    return unpack_rows_python(data)


def unpack_rows_python(data: Buffer) -> list[tuple]:
    """:func:`_unpack_rows` in Python: the same layout, read with :mod:`struct`."""
    view = memoryview(data).cast("B")
    if view.nbytes < _ROWS_HEAD.size:
        raise ValueError("not a block of packed rows")
    rows, arity, codes = _ROWS_HEAD.unpack_from(view)
    columns = codes[:arity].decode("latin-1") if 1 <= arity <= len(codes) else ""
    if not columns or set(columns) - {"q", "d"} or view.nbytes != _ROWS_HEAD.size + rows * arity * 8:
        raise ValueError("not a block of packed rows")
    return list(struct.iter_unpack("=" + columns, view[_ROWS_HEAD.size:])) if rows else []


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
