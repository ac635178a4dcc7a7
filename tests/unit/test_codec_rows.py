"""The codec's packed rows: lists of flat numeric tuples cross the rings as blocks of 8-byte values.

What must hold: every batch decodes to a list equal to the one encoded, with the same types at every
place (a bool stays a bool, an int too big for 64 bits stays that int); only lists that qualify are
packed; the sender's objects are never changed; the C and the Python readers agree.
"""

from __future__ import annotations

import math
import struct
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastream.ipc.codec as codec_mod
from elastream.ipc import CodecError, PickleCodec

rowsfast = pytest.importorskip("elastream.ipc._rowsfast")

pytestmark = pytest.mark.timeout(60)

codec = PickleCodec()
MIN = codec_mod.ROWS_MIN


def frame(parts) -> bytes:
    return b"".join(bytes(memoryview(p).cast("B")) for p in parts)


def out_of_band_buffers(parts) -> int:
    """How many out-of-band buffers a payload carries (the frame header's count)."""
    return struct.unpack_from("<BBHI", frame(parts))[3]


def round_trip(batch: list) -> list:
    return codec.decode_batch(frame(codec.encode_batch(batch)))


def same_types(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b))
    return True


def test_a_batch_of_int_pairs_is_packed_and_comes_back_equal():
    batch = [(k % 1000, k * 65_537) for k in range(500)]
    parts = codec.encode_batch(batch)
    assert out_of_band_buffers(parts) == 1
    assert len(memoryview(parts[-1]).cast("B")) == codec_mod._ROWS_HEAD.size + 500 * 2 * 8  # the values, no opcodes
    back = round_trip(batch)
    assert back == batch and same_types(back, batch)


def test_floats_keep_their_bits():
    batch = [(1.5, -0.0, math.inf, -math.inf, 7, float(k)) for k in range(MIN)]
    back = round_trip(batch)
    assert back == batch and same_types(back, batch)
    assert math.copysign(1.0, back[0][1]) == -1.0
    nan = round_trip([(math.nan, 1)] * MIN)
    assert math.isnan(nan[5][0]) and nan[5][1] == 1


@pytest.mark.parametrize("row, why", [
    ((1, True), "a bool is not an int here"),
    ((1, 2 ** 63), "beyond 64 bits"),
    ((1, -(2 ** 63) - 1), "below 64 bits"),
    ((1, "a"), "a str"),
    ((1, None), "None"),
    ((), "no fields"),
    (tuple(range(17)), "more fields than a block holds"),
])
def test_rows_that_do_not_qualify_keep_pickle(row, why):
    batch = [(0, 0)] * (MIN - 1) + [row] + [(0, 0)] * 5  # the odd row mid-list: packing gives up late
    assert rowsfast.pack_rows(batch, MIN) is None, why
    parts = codec.encode_batch(batch)
    assert out_of_band_buffers(parts) == 0
    back = round_trip(batch)
    assert back == batch and same_types(back, batch)


def test_ragged_rows_mixed_columns_and_tuple_subclasses_keep_pickle():
    Pair = namedtuple("Pair", "k v")
    for batch in ([(1, 2)] * MIN + [(1, 2, 3)],            # another arity
                  [(1, 2)] * MIN + [(1, 2.0)],             # a float in an int column
                  [Pair(1, 2)] * MIN,                      # a tuple subclass
                  [[1, 2]] * MIN):                         # lists, not tuples
        assert rowsfast.pack_rows(batch, MIN) is None
        back = round_trip(batch)
        assert back == batch and same_types(back, batch)


def test_the_int64_edges_pack():
    batch = [(2 ** 63 - 1, -(2 ** 63), 0, -1)] * MIN
    assert rowsfast.pack_rows(batch, MIN) is not None
    assert round_trip(batch) == batch


def test_short_lists_stay_in_the_pickle_stream():
    batch = [(1, 2)] * (MIN - 1)
    assert out_of_band_buffers(codec.encode_batch(batch)) == 0 and round_trip(batch) == batch


def test_list_fields_of_messages_are_packed_and_the_messages_left_alone():
    items = [(k, k + 1) for k in range(100)]
    outputs = [(k, float(k)) for k in range(MIN)]
    small = [(1, 2)]
    messages = [(7, 100, None, items), ("ctl", "x"), (8, 32, None, outputs, True, 1, 32, 0.5), (9, 1, None, small)]
    parts = codec.encode_batch(messages)
    assert out_of_band_buffers(parts) == 2                  # items and outputs; the short list stays
    assert messages[0][3] is items and type(messages[0][3]) is list  # the sender's tuples are unchanged
    back = codec.decode_batch(frame(parts))
    assert back == messages and same_types(back, messages)


def test_packing_works_on_its_own_copy_of_the_batch():
    # wrap() is Python code: the caller's list may change meanwhile (another thread); the result must not.
    items = [(k, k) for k in range(MIN)]
    messages = [(1, items), (2, items), "end"]
    seen = []

    def wrap_and_clear(block):
        seen.append(block)
        messages.clear()
        return codec_mod._PackedRows(block)

    packed = rowsfast.pack_fields(messages, MIN, wrap_and_clear)
    assert len(seen) == 2 and [m[0] if isinstance(m, tuple) else m for m in packed] == [1, 2, "end"]
    assert all(isinstance(m[1], codec_mod._PackedRows) for m in packed[:2]) and messages == []


def test_nothing_to_pack_returns_none():
    assert rowsfast.pack_fields([(1, "a"), "text", (2, [(1, 2)])], MIN, codec_mod._PackedRows) is None
    assert rowsfast.pack_fields((1, 2), MIN, codec_mod._PackedRows) is None   # not a list
    assert rowsfast.pack_rows((1, 2), MIN) is None


def test_the_python_reader_agrees_with_the_c_reader():
    for batch in ([(k, -k * 3) for k in range(200)], [(0.25, k) for k in range(MIN)], [(1,)] * 1):
        block = rowsfast.pack_rows(batch, 1)
        assert rowsfast.unpack_rows(block) == codec_mod.unpack_rows_python(block) == batch
        assert same_types(codec_mod.unpack_rows_python(block), batch)


def test_a_packed_batch_decodes_without_the_extension(monkeypatch):
    batch = [(k, 2 * k) for k in range(100)]
    payload = frame(codec.encode_batch(batch))
    monkeypatch.setattr(codec_mod, "_rowsfast", None)
    assert codec.decode_batch(payload) == batch
    assert out_of_band_buffers(codec.encode_batch(batch)) == 0  # and without it, encoding pickles


@pytest.mark.parametrize("reader", [rowsfast.unpack_rows, codec_mod.unpack_rows_python], ids=["c", "python"])
def test_a_damaged_block_is_refused(reader):
    block = rowsfast.pack_rows([(1, 2)] * MIN, MIN)
    for bad in (block[:10], block[:-8], block + b"\0" * 8, block[:4] + b"\x00" + block[5:],
                block[:8] + b"x" + block[9:], block[:8] + b"\xff" + block[9:]):
        with pytest.raises(ValueError, match="packed rows"):
            reader(bad)


def test_a_damaged_frame_still_names_the_codec():
    with pytest.raises(CodecError):
        codec.decode_batch(b"\x00" * 16)


# -- property: any batch of tuples comes back equal, types included --------------------------------
numbers = st.one_of(st.integers(min_value=-(2 ** 64), max_value=2 ** 64), st.floats(allow_nan=False),
                    st.booleans())
values = st.one_of(numbers, st.none(), st.text(max_size=3))


@st.composite
def batches(draw):
    arity = draw(st.integers(1, 4))
    column = draw(st.sampled_from(["int", "float", "any"]))
    cell = {"int": st.integers(-(2 ** 63), 2 ** 63 - 1), "float": st.floats(allow_nan=False),
            "any": values}[column]
    rows = draw(st.lists(st.tuples(*[cell] * arity), min_size=0, max_size=3 * MIN))
    if rows and draw(st.booleans()):  # one odd row somewhere
        at = draw(st.integers(0, len(rows) - 1))
        rows[at] = draw(st.tuples(*[values] * draw(st.integers(0, 5))))
    return rows


@settings(max_examples=300, deadline=None)
@given(batches(), st.booleans())
def test_any_batch_round_trips_with_its_types(rows, as_message):
    batch = [("msg", len(rows), rows)] if as_message else rows
    back = round_trip(batch)
    assert back == batch and same_types(back, batch)
