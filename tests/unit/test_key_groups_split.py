"""The keyed split routes by the stable key groups of keygroups.py, in C and in Python alike.

A replica's ``export_state(groups)`` finds the keys of a group with
``keygroups.stable_hash``; the split's C loop (``_splitfast.cut``) must put every
key in that same group, or a moved group would leave keys behind.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastream.operators.keygroups import key_group, stable_hash
from elastream.ordered import routing

pytestmark = pytest.mark.skipif(routing._splitfast is None, reason="elastream.ordered._splitfast is not built")

scalars = st.one_of(st.integers(-2**70, 2**70), st.integers(-3, 3), st.text(max_size=8),
                    st.text(alphabet=st.characters(max_codepoint=127), max_size=8), st.binary(max_size=8))
keys = st.one_of(scalars, st.tuples(scalars, scalars), st.tuples(st.tuples(scalars), scalars),
                 st.booleans(), st.none(), st.floats(allow_nan=False))


def groups_in_c(keys: list, groups: int) -> dict:
    """Each key's group as the C cut routes it (one replica per group: the piece is the group)."""
    pieces, _, _ = routing._splitfast.cut(list(keys), lambda k: k, list(range(groups)), groups, groups,
                                          None, None, None)
    return {repr(k): g for g, piece in enumerate(pieces) for k in piece}


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(keys, max_size=40), groups=st.sampled_from([1, 2, 3, 7, 128, 1000]))
def test_the_c_split_and_the_python_stable_hash_give_the_same_groups(keys, groups):
    in_c = groups_in_c(keys, groups)
    pieces, _, _ = routing.cut_by_key_python(list(keys), lambda k: k, list(range(groups)), groups, groups)
    in_python = {repr(k): g for g, piece in enumerate(pieces) for k in piece}
    assert in_c == in_python == {repr(k): key_group(k, groups) for k in keys}


@pytest.mark.parametrize("key", [0, 1, -1, -2, 2**64 + 5, -(2**64) - 5, "", "user-17", "é", "キー", "😀x",
                                 b"", b"\x00\xff", (1, "a"), ("a", (b"b", -3)), True, None, 2.5])
def test_each_kind_of_key_falls_in_its_stable_group(key):
    for groups in (2, 128):
        assert groups_in_c([key], groups) == {repr(key): stable_hash(key) % groups}


def test_str_and_bytes_hash_as_the_crc32_of_their_utf8_bytes():
    assert stable_hash("user-17") == zlib.crc32(b"user-17")
    assert groups_in_c(["é€"], 1000) == {repr("é€"): zlib.crc32("é€".encode()) % 1000}
    assert groups_in_c([b"abc"], 1000) == {repr(b"abc"): zlib.crc32(b"abc") % 1000}


def test_a_str_utf8_cannot_encode_and_a_str_subclass_go_through_the_python_hash():
    class Name(str):
        pass

    lone = "a\ud800b"  # a lone surrogate: stable_hash encodes it with surrogatepass
    assert groups_in_c([lone], 1000) == {repr(lone): stable_hash(lone) % 1000}
    assert groups_in_c([Name("user-17")], 1000) == {repr("user-17"): zlib.crc32(b"user-17") % 1000}


def test_an_unhashable_key_fails_in_c_as_in_python():
    with pytest.raises(TypeError):
        groups_in_c([[1]], 4)
    with pytest.raises(TypeError):
        stable_hash([1])
