"""Wire format of an ordered split / replica / merge (C-Stream §4.2): the message shapes and their codes.

What the split, its replicas and the merge send one another are plain tuples:
they cross shared-memory rings pickled in batches, many per second, and a
tuple whose fields are read by position costs least there (a piece is the
unit, not a tuple of the stream, so this is the one place where a shape is
named by its first field).

* split → replica: ``(seq, size, offsets, items)`` — ``seq >= 0`` the batch's
  serial number; ``size`` the batch's number of tuples; ``offsets`` (an
  ``array('i')``: one block of bytes on the wire, no int object per tuple)
  the tuples' positions in the batch, or None when ``items`` is the whole
  batch in order. Controls: ``(EXPORT_SEQ, group)`` asks the replica for the
  state of one key group; ``(IMPORT_SEQ, group, state)`` hands it one.
* replica → merge: ``(seq, size, offsets, outputs, nested, replica, inputs,
  busy_s)`` — ``outputs`` is flat (the batch's outputs in order, or one output
  per offset when the operator is one-to-one) unless ``nested``, when
  ``outputs[i]`` is the list of outputs of the input at ``offsets[i]``;
  ``inputs`` and ``busy_s`` feed the split's
  :class:`~elastream.ordered.link.SplitMergeLink`. Also ``(STATE_SEQ,
  replica, group, state, returned)`` answering an export (``returned``: the
  group's pieces it took back unprocessed, :mod:`elastream.ordered.early_export`), and at end of input
  ``(END_SEQ, replica, outputs, by_key)`` — what the replica's
  ``on_inputs_closed`` returned, or with ``by_key`` its operator's end outputs
  as ``(key, outputs)`` pairs.

A tuple's place in the stream is ``(seq, offset)``: the merge completes a
batch once the offsets of its pieces add up to its size, however many pieces
that took.

Threading: constants and pure functions, safe from any thread or process.
"""

from __future__ import annotations

from array import array

#: ``seq`` codes of control messages (data pieces have ``seq >= 0``).
END_SEQ, STATE_SEQ, EXPORT_SEQ, IMPORT_SEQ = -1, -2, -3, -4
#: The message that turns a replica into its operator: its unit moved whole into the replica's process
#: (:mod:`elastream.runtime.bypass`), and what follows on its input are the unit's tuples, not pieces.
WHOLE_SEQ = -5
WHOLE = (WHOLE_SEQ, 0, None, [])


def in_batch(offsets: array | None, local: array) -> array:
    """Offsets in the batch of a piece's tuples at positions ``local`` in the piece (``offsets`` None: the
    piece is the whole batch).

    Example: ``in_batch(array("i", [3, 5, 8]), array("i", [0, 2])) == array("i", [3, 8])``
    """
    return local if offsets is None else array("i", [offsets[j] for j in local])
