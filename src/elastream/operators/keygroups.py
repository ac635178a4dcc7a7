"""Key groups: the fixed, stable division of a partitioned operator's keys (the unit that moves).

A partitioned operator's keys fall into a fixed number of *key groups* (Flink
calls the number its maximum parallelism). A key group is what moves between
replicas, processes and backends, with the state of its keys, so the mapping
key → group must be the same in every process and every run. Python's
``hash`` is salted for ``str`` and ``bytes`` (a worker started by the fork
server or by spawn has its own salt), so :func:`stable_hash` hashes those by
CRC-32 of their bytes and keeps Python's own (unsalted) hash for numbers,
``None`` and booleans; tuples combine their elements' stable hashes.

Threading: pure functions, safe from any thread or process.

Example::

    key_group("user-17", 128) == key_group("user-17", 128)   # in every process, every run
    key_group(5, 128) == 5
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from zlib import crc32

#: Key groups of a partitioned operator that declares no ``partitions`` (Flink's default maximum
#: parallelism is 128 as well): enough groups to spread load over the replicas of one machine, few
#: enough that per-group bookkeeping stays small.
DEFAULT_KEY_GROUPS = 128


def stable_hash(key: Any) -> int:
    """A hash of ``key`` that is the same in every process and run (for numbers, str, bytes, tuples of them).

    Other types fall back to Python's ``hash``, which is stable for types that do not hash bytes
    (an object with its own ``__hash__`` over stable fields is fine).
    """
    kind = type(key)
    if kind is int:
        return hash(key)
    if kind is str:
        return crc32(key.encode("utf-8", "surrogatepass"))
    if kind is tuple:
        return hash(tuple(stable_hash(part) for part in key))
    if kind is bytes:
        return crc32(key)
    if isinstance(key, str):  # a str subclass (an enum value, a named string) hashes as its text
        return crc32(str.__str__(key).encode("utf-8", "surrogatepass"))
    return hash(key)


def key_group(key: Any, groups: int) -> int:
    """The key group of ``key`` among ``groups`` (``0 <= result < groups``).

    Example: ``key_group(130, 128) == 2``
    """
    return stable_hash(key) % groups


def keys_in_groups(keys: Iterable[Any], groups: int, chosen: Iterable[int]) -> list[Any]:
    """Those of ``keys`` whose key group is in ``chosen``, in their order."""
    wanted = frozenset(chosen)
    return [k for k in keys if stable_hash(k) % groups in wanted]
