"""Order keys, and items and keys as bytes, for the Spark translation (:mod:`elastream.spark.streaming`).

An *order key* is bytes that sort like an item's position in a sequential
one-tuple-at-a-time run: a source row's key is ``01 | seq`` (file number, row
in file); the ``j``-th output of an input that may give several appends
``02 | j``; an input of a Union appends ``04 | port``; the ``on_end`` outputs of
keyed step ``s`` for a key first seen at input ``f`` are
``03 | s | f | 00 | 02 | j``. Control rows (markers, end of stream) have keys
starting with 00, which no data key does.

Items and states travel pickled (:func:`dumps`); a keyed step groups its rows
by :func:`key_bytes` of their key.

Threading: pure functions and constants, used by the driver and in Spark's Python workers alike.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

SOURCE_TAG, CHILD_TAG, END_TAG, PORT_TAG = b"\x01", b"\x02", b"\x03", b"\x04"
#: Keys of the control rows: a step's marker (followed by the step number) and the end of stream.
MARKER_KEY, END_KEY = b"\x00M", b"\x00E"
#: Bits of the row number in a source sequence number (the file number takes the bits above).
ROW_BITS = 36


def source_key(seq: int) -> bytes:
    """The order key of the ``seq``-th source row (``seq`` = file number << 36 | row in file).

    Example: ``source_key(5) < source_key(6)``
    """
    return SOURCE_TAG + seq.to_bytes(8, "big")


def child_key(k: bytes, j: int) -> bytes:
    """The order key of the ``j``-th output of the input with key ``k``.

    Example: ``source_key(5) < child_key(source_key(5), 0) < source_key(6)``
    """
    return k + CHILD_TAG + j.to_bytes(4, "big")


def port_key(k: bytes, port: int) -> bytes:
    """The order key of the input with key ``k`` as it enters a Union on input ``port``."""
    return k + PORT_TAG + bytes([port])


def end_key(stage: int, first: bytes, j: int) -> bytes:
    """The key of the ``j``-th end-of-stream output of keyed step ``stage`` for a key first seen at ``first``.

    The 00 after ``first`` sorts a key that is a prefix of another first, as
    tuples sort; ``03`` puts every end output after every data row.
    """
    return END_TAG + stage.to_bytes(2, "big") + first + b"\x00" + CHILD_TAG + j.to_bytes(4, "big")


def marker_key(step: int) -> bytes:
    """The key of the control row that marks the end of feeding step ``step``."""
    return MARKER_KEY + step.to_bytes(8, "big")


def is_control(k: bytes) -> bool:
    """Whether ``k`` is a marker or end-of-stream row (not data).

    Example: ``is_control(marker_key(3)) and not is_control(source_key(3))``
    """
    return k[:1] == b"\x00"


# -- values and keys as bytes ---------------------------------------------------------------------------------------

def dumps(obj: Any) -> bytes:
    """Pickle an item or a state; cloudpickle for what plain pickle refuses (lambdas inside)."""
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(obj, protocol=5)


def loads(data: bytes) -> Any:
    """The object :func:`dumps` pickled."""
    return pickle.loads(data)


def key_bytes(key: Any) -> bytes:
    """The grouping bytes of a key: equal for keys Python's dicts treat as equal (ints, floats, str, tuples).

    Pickled without a memo (so ``("a", "a")`` pickles alike whether or not both
    strings are one object), after mapping bools, integral floats and numpy
    scalars to ints, as ``1 == 1.0 == True`` share one dict slot.

    Example: ``key_bytes(1) == key_bytes(1.0) == key_bytes(True)``
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True
    pickler.dump(_canonical(key))
    return buffer.getvalue()


def _canonical(key: Any) -> Any:
    if type(key) is tuple:
        return tuple(_canonical(k) for k in key)
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if type(key).__module__ == "numpy" and hasattr(key, "item"):
        return _canonical(key.item())
    return key
