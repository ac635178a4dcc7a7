"""A key group's state leaves its replica at once, with the group's unprocessed tuples taken back.

A partition move (:mod:`elastream.ordered.rebalance`) holds the moving key
group's new tuples until its state reaches the target replica. The export
request travels in the replica's input stream behind what the replica has
been sent already: up to its window of work (a fifth of a second for a replica
in another process). Meanwhile the merge, which releases batches strictly by
serial number, waits for the held group: the whole output stream pauses.

The replica need not work through that backlog first. What its input port
holds ahead of the export it has not processed, so it can take the moving
group's tuples out of those pieces, export the group's state as it is now, and
hand the tuples back with it (:func:`take_back_exports`). The split then sends
them to the target ahead of the ones it held, each with its serial number and
offset, so the merge completes their batches exactly as before and the order
per key is the stream's. The move waits for the replica's current piece only.

An import of the same group queued ahead of an export keeps that export in
its place: a group that arrives and leaves again must arrive first. Imports
of other groups do not hold it back (a replica that has just been given
groups is often the one giving others away).

Threading: a pure function, called by the replica's worker under its input
buffer's lock (:meth:`~elastream.runtime.buffer.PortBuffer.rewrite`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from elastream.ordered.routing import cut_by_key
from elastream.ordered.wire import EXPORT_SEQ, IMPORT_SEQ, in_batch

#: What :func:`take_back_exports` returns: the data pieces left ahead of the port, the messages left in
#: the port, and per exported group (in the order of the requests) the pieces of its tuples taken back.
TakenBack = tuple[list, list, dict[int, list[tuple]]]


def take_back_exports(pending: list, key: Callable[[Any], Any], groups: int,
                      ahead: Sequence[tuple] = ()) -> TakenBack | None:
    """Answer the export requests in ``pending`` (a replica's queued input, in order) ahead of their turn.

    ``ahead`` are data pieces the replica holds before ``pending`` (the rest of a piece it is working
    through in slices). Returns None when every export request waits behind an import of its own group
    (or there is none); otherwise what to keep of ``ahead`` and of ``pending`` (the requests answered
    removed, the exported groups' tuples cut out of the pieces before them, empty pieces dropped) and,
    per exported group, its taken-back pieces ``(seq, size, offsets, items)`` in stream order.

    Example::

        take_back_exports([(0, 2, None, ["a", "b"]), (EXPORT_SEQ, 0)], key=len, groups=1)
        # -> ([], [], {0: [(0, 2, array('i', [0, 1]), ["a", "b"])]}): the whole piece comes back
    """
    exported: dict[int, list[tuple]] = {}
    imported: set[int] = set()
    last = -1
    for i, msg in enumerate(pending):
        if msg[0] == IMPORT_SEQ:
            imported.add(msg[1])
        elif msg[0] == EXPORT_SEQ and msg[1] not in imported:
            exported[msg[1]] = []
            last = i
    if not exported:
        return None
    table = [-1 if g in exported else 0 for g in range(groups)]
    kept_ahead: list = []
    for msg in ahead:
        _cut_out(msg, key, table, exported, kept_ahead)
    kept: list = []
    for i, msg in enumerate(pending):
        if i > last:
            kept.append(msg)
        elif msg[0] >= 0:
            _cut_out(msg, key, table, exported, kept)
        elif msg[0] != EXPORT_SEQ or msg[1] not in exported:
            kept.append(msg)  # an import, or an export behind its group's import: in its place
        # else an export request answered now
    return kept_ahead, kept, exported


def _cut_out(piece: tuple, key: Callable[[Any], Any], table: list[int], exported: dict[int, list[tuple]],
             kept: list) -> None:
    """Append to ``kept`` what stays of data ``piece`` once the tuples of the groups in ``exported`` (those
    ``table`` marks -1) go to their lists there."""
    seq, size, offsets, items = piece
    stay, local, taken = cut_by_key(items, key, table, len(table), 1)
    for g, (offs, xs) in taken.items():
        exported[g].append((seq, size, in_batch(offsets, offs), xs))
    if not taken:
        kept.append(piece)
    elif stay[0]:
        kept.append((seq, size, in_batch(offsets, local[0]), stay[0]))
