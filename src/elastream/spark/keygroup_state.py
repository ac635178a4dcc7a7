"""Key-group state in Spark: one Python call per key group per micro-batch steps every key of the group.

A keyed layer (:class:`~elastream.spark.layers.KeyedLayer`) groups its rows by
(route, key group) rather than by key, so Spark's state store holds one value
per key group of each keyed step: the pickled dict of that group's keys (key →
:data:`Entry` ``[first order key, key, user state]``; a plain dict of the key
objects, so keys Python treats as equal share an entry, as in the local
engine's operators; a stateful step's one entry is under ``None``). One call of
:class:`KeyGroupCall` unpickles that dict once, steps the group's rows in
order-key order (the order a sequential run gives each key) in a plain loop,
and pickles the dict back once. With tens of thousands of keys this replaces
tens of thousands of Python calls (one pandas frame each) per micro-batch by
at most ``key_groups`` calls (:mod:`elastream.operators.keygroups`).

End of stream: the end row reaches every key group of every keyed step as an
*end copy* (:mod:`elastream.spark.layers`), in the micro-batch that carries it;
the call steps the group's data rows of that batch first, then flushes every
key of the group once (its ``on_end``) and removes the group from the state
store. No timeout and no watermark are involved, so the end costs no extra
micro-batch.

Threading: runs in Spark's Python workers, one call at a time per worker.

Example (what a layer does with one group's frames)::

    outputs = KeyGroupCall(step, spark_state).run(frames)   # [(order key, item), ...]
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from elastream.spark.failures import fail_in_worker
from elastream.spark.order_keys import CHILD_TAG, END_KEY, child_key, dumps, end_key, loads
from elastream.spark.plan import KeyedStep

#: The order-key suffixes of a step's first outputs per input (child_key's), made once.
_CHILD_SUFFIXES = tuple(CHILD_TAG + j.to_bytes(4, "big") for j in range(64))
#: What a key group keeps per key: [order key where the key was first seen, the key, the user's state].
Entry = list
#: Keys of one key group: key → Entry.
GroupState = dict


class _NoValue:
    """A KeyedReduce key without ``initial`` before its first item (its first item becomes the fold)."""

    def __reduce__(self) -> str:
        return "_NO_VALUE"  # unpickles as the one instance, so ``is _NO_VALUE`` holds in any worker


_NO_VALUE = _NoValue()


def group_rows(frames: Iterable[Any]) -> tuple[list[bytes], list[bytes]]:
    """The order keys and pickled items of a group's pandas frames, as plain lists (one pass each)."""
    ks: list[bytes] = []
    vs: list[bytes] = []
    for frame in frames:
        ks.extend(frame["k"].tolist())
        vs.extend(frame["v"].tolist())
    return ks, vs


def _after_control_rows(order: list[int], ks: list[bytes]) -> tuple[int, bool]:
    """Where the data rows start in ``order`` (control keys start with 00, so they sort first), and whether the
    end of stream is among the control rows."""
    start = 0
    ended = False
    while start < len(order) and ks[order[start]][:1] == b"\x00":
        ended = ended or ks[order[start]] == END_KEY
        start += 1
    return start, ended


@dataclass(slots=True)
class KeyGroupCall:
    """One call of a keyed step for one key group: step its keys' rows in order, flush them at the end of stream.

    ``spark_state`` is Spark's ``GroupState`` of the group (one binary column:
    the pickled :data:`GroupState`).
    """

    step: KeyedStep
    spark_state: Any

    def run(self, frames: Iterator[Any]) -> list[tuple[bytes, Any]]:
        """The outputs (order key, item) of this group's rows in this micro-batch; updates Spark's state."""
        state = self.spark_state
        ks, vs = group_rows(frames)
        keys: GroupState = loads(state.get[0]) if state.exists else {}
        order = sorted(range(len(ks)), key=ks.__getitem__)
        data, ended = _after_control_rows(order, ks)
        out: list[tuple[bytes, Any]] = []
        if self.step.reduce:
            self._reduce(keys, order, data, ks, vs, out)
        else:
            self._process(keys, order, data, ks, vs, out)
        if self.step.key is None and None not in keys:  # a stateful step exists from the start
            keys[None] = [b"", None, self._initial()]
        if ended:  # the end of stream: every key of the group flushes once, and the group leaves the store
            out.extend(self.flush(keys))
            state.remove()
        else:
            state.update((dumps(keys),))
        return out

    def _process(self, keys: GroupState, order: list[int], start: int, ks: list[bytes], vs: list[bytes],
                 out: list) -> None:
        """A keyed or stateful process step over the group's data rows (``order[start:]``)."""
        s = self.step
        key_fn, step_fn = s.key, s.step
        unpickle, append = pickle.loads, out.append
        try:
            for i in order[start:]:
                k = ks[i]
                item = unpickle(vs[i])
                key = key_fn(item) if key_fn is not None else None
                entry = keys.get(key)
                if entry is None:  # the key's first item: on_end gets this key object, as locally
                    entry = keys[key] = [k, key, self._initial()]
                entry[2], emitted = step_fn(entry[2], item)
                if emitted:
                    for j, e in enumerate(emitted):
                        append((k + _CHILD_SUFFIXES[j] if j < 64 else child_key(k, j), e))
        except Exception as exc:  # noqa: BLE001 - the operator's code: report it by name
            raise fail_in_worker(s.name, exc) from exc

    def _reduce(self, keys: GroupState, order: list[int], start: int, ks: list[bytes], vs: list[bytes],
                out: list) -> None:
        """A KeyedReduce: the running fold per key, emitted as (key of the item, value) for every data row."""
        s = self.step
        key_fn, fold = s.key, s.step
        assert key_fn is not None
        unpickle = pickle.loads
        try:
            for i in order[start:]:
                k = ks[i]
                item = unpickle(vs[i])
                key = key_fn(item)
                entry = keys.get(key)
                if entry is None:
                    entry = keys[key] = [k, key, self._initial()]
                entry[2] = item if entry[2] is _NO_VALUE else fold(entry[2], item)
                out.append((k, (key, entry[2])))
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(s.name, exc) from exc

    def _initial(self) -> Any:
        factory = self.step.factory
        if factory is None:
            return _NO_VALUE
        try:
            return factory()
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(self.step.name, exc) from exc

    def flush(self, keys: GroupState) -> list[tuple[bytes, Any]]:
        """Every key's ``on_end`` outputs, keyed after every data row in first-seen order (:func:`end_key`)."""
        s = self.step
        if s.on_end is None:
            return []
        out: list[tuple[bytes, Any]] = []
        try:
            for first, key, value in keys.values():
                emitted = s.on_end(value) if s.key is None else s.on_end(key, value)
                out.extend((end_key(s.stage, first, j), e) for j, e in enumerate(emitted or ()))
        except Exception as exc:  # noqa: BLE001
            raise fail_in_worker(s.name, exc) from exc
        return out
