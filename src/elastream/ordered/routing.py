"""The per-tuple kernels of an ordered split and merge: the keyed cut of a batch and the reassembly of a piece.

:func:`cut_by_key` routes one batch by key group: tuple ``x`` goes to group
``stable_hash(key(x)) % groups`` (:mod:`elastream.operators.keygroups`, the
same in every process, so a replica's ``export_state`` finds the groups the
split routed to it) and to the replica that owns the group. :func:`place`
puts a piece's outputs back at their offsets in the batch. Both run in C
(:mod:`elastream.ordered._splitfast`) when the extension is built; the
``*_python`` twins are the fallback and the reference the tests compare with.

Threading: pure functions of their arguments (which the caller owns: the split's
lists, the merge's slots); called from the one worker running the split or merge.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

from elastream.operators.keygroups import stable_hash

try:
    from elastream.ordered import _splitfast
except ImportError:  # built without a C compiler: cut_by_key_python does the same
    _splitfast = None


def cut_by_key(items: list, key: Callable[[Any], Any], table: list[int], partitions: int, replicas: int,
               load: list[int] | None = None, seen: dict | None = None,
               keys: list[list] | None = None) -> tuple[list[list], list[list[int]], dict[int, tuple[list, list]]]:
    """Route one batch by key: ``(pieces, offsets, held)``.

    Tuple ``x`` at position ``j`` goes to partition (key group) ``p = stable_hash(key(x)) % partitions``
    and to replica ``table[p]`` (``pieces[r]`` gets ``x``, ``offsets[r]`` gets ``j``);
    a partition whose entry is negative is moving, and its tuples go to
    ``held[p] = (offsets, tuples)``. Offsets are ``array('i')``: no int object per
    tuple, and one block of bytes when a piece crosses processes. ``load[p]`` counts partition ``p``'s
    tuples; a key not yet in ``seen`` is added to it (and to ``keys[p]`` unless ``keys`` is None). The
    loop runs in C (:mod:`elastream.ordered._splitfast`) when the extension is built.

    Example: ``cut_by_key([(1, "a"), (2, "b")], lambda x: x[0], [0, 1], 2, 2)``
    → ``([[(2, "b")], [(1, "a")]], [array('i', [1]), array('i', [0])], {})``
    """
    if _splitfast is not None:
        return _splitfast.cut(items, key, table, partitions, replicas, load, seen, keys)
    return cut_by_key_python(items, key, table, partitions, replicas, load, seen, keys)


def cut_by_key_python(items: list, key: Callable[[Any], Any], table: list[int], partitions: int, replicas: int,
                      load: list[int] | None = None, seen: dict | None = None,
                      keys: list[list] | None = None) -> tuple[list[list], list[array], dict[int, tuple[array, list]]]:
    """:func:`cut_by_key` in Python (without the C extension, and the reference it is tested against)."""
    pieces: list[list] = [[] for _ in range(replicas)]
    offsets = [array("i") for _ in range(replicas)]
    held: dict[int, tuple[array, list]] = {}
    for j, x in enumerate(items):
        k = key(x)
        p = stable_hash(k) % partitions
        if seen is not None and k not in seen:
            seen[k] = None
            if keys is not None:
                keys[p].append(k)
        if load is not None:
            load[p] += 1
        r = table[p]
        if r >= 0:
            pieces[r].append(x)
            offsets[r].append(j)
        else:
            group = held.get(p)
            if group is None:
                group = held[p] = (array("i"), [])
            group[0].append(j)
            group[1].append(x)
    return pieces, offsets, held


def place(slots: list, offsets: Sequence[int], outputs: list) -> None:
    """The merge's reassembly of one piece: ``slots[offsets[i]] = outputs[i]`` for every ``i``.

    In C when the extension is built (``offsets`` an ``array('i')`` or a list of ints).

    Example: ``slots = [None] * 3; place(slots, array("i", [2, 0]), ["c", "a"])`` → ``["a", None, "c"]``
    """
    if _splitfast is not None:
        _splitfast.place(slots, offsets, outputs)
    else:
        place_python(slots, offsets, outputs)


def place_python(slots: list, offsets: Sequence[int], outputs: list) -> None:
    """:func:`place` in Python."""
    if len(offsets) != len(outputs):
        raise ValueError("a piece needs one offset per output")
    for off, o in zip(offsets, outputs):
        slots[off] = o
