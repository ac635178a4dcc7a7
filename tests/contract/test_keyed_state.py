"""Contract: keyed operators give every key a state of its own, also when the state is mutated in place.

``key_by(k).process(step, state=list | dict)`` where ``step`` appends to the
list / updates the dict it is given and returns that same object. If new keys
shared one initial state object, every key would see every other key's tuples;
with immutable states (``int``) that bug is invisible. Checked under every
execution mode with 1 and 4 partitions (4 threads: dynamic allotment; replicas:
keys split over two instances), with the output equal to a sequential fold in
input order, ``on_end`` seeing each key's own tuples, and (in this process) one
distinct object per key.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)

N = 3000
KEYS = 23


def events(seed: int = 5) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(KEYS), i) for i in range(N)]


def append_step(seen: list, event: tuple[int, int]):
    seen.append(event[1])  # mutated in place, returned as the same object
    return seen, [(event[0], len(seen), seen[0])]


def count_step(counts: dict, event: tuple[int, int]):
    parity = event[1] % 2
    counts[parity] = counts.get(parity, 0) + 1
    return counts, [(event[0], counts.get(0, 0), counts.get(1, 0))]


PARTITIONS = pytest.mark.parametrize("partitions", [1, 4], ids=lambda p: f"{p}part")


@PARTITIONS
def test_list_state_is_per_key_when_mutated_in_place(execution_mode, partitions):
    data = events()
    finals: dict[int, list] = {}  # filled only when on_end runs in this process (the thread modes)

    def on_end(key, seen):
        finals[key] = seen
        return [(key, "end", tuple(seen))]

    flow = es.Flow("keyed-list")
    flow.source(es.ops.FromIterable(data), name="src") \
        .key_by(lambda e: e[0], partitions=partitions).process(append_step, state=list, on_end=on_end, name="kp") \
        .sink(es.ops.Collect(), name="out")
    result = execution_mode.run(flow, max_queue_size=64)

    per_key: dict[int, list[int]] = defaultdict(list)
    expected = []
    for key, i in data:
        per_key[key].append(i)
        expected.append((key, len(per_key[key]), per_key[key][0]))
    out = result.outputs["out"]
    assert out[:N] == expected  # a sequential fold, in input order
    # Each key's list holds its own tuples only, in order.
    assert sorted(out[N:]) == sorted((k, "end", tuple(v)) for k, v in per_key.items())
    if execution_mode.in_this_process:
        assert finals == dict(per_key)
        assert len({id(v) for v in finals.values()}) == len(per_key)  # one distinct object per key


@PARTITIONS
def test_dict_state_is_per_key_when_mutated_in_place(execution_mode, partitions):
    data = events(seed=6)
    flow = es.Flow("keyed-dict")
    flow.source(es.ops.FromIterable(data), name="src") \
        .key_by(lambda e: e[0], partitions=partitions).process(count_step, state=dict, name="kp") \
        .sink(es.ops.Collect(), name="out")
    result = execution_mode.run(flow, max_queue_size=64)

    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    expected = []
    for key, i in data:
        counts[key][i % 2] += 1
        expected.append((key, counts[key][0], counts[key][1]))
    assert result.outputs["out"] == expected


def test_first_state_of_a_new_key_is_a_fresh_object(execution_mode):
    """The smallest case: two keys, one tuple each; the second key must not see the first key's tuple."""
    def step(seen: list, event: tuple[str, int]):
        seen.append(event[1])
        return seen, [(event[0], list(seen))]

    flow = es.Flow("two-keys")
    flow.source(es.ops.FromIterable([("a", 1), ("b", 2)]), name="src") \
        .key_by(lambda e: e[0]).process(step, state=list, name="kp").sink(es.ops.Collect(), name="out")
    assert execution_mode.run(flow).outputs["out"] == [("a", [1]), ("b", [2])]
