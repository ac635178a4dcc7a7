"""Contract: ordered execution (ordered-multicore Definition 5.1) under every policy and execution mode.

A flow of map / filter / flat_map / ``key_by().reduce()`` / ``key_by().process(state=...)`` /
stateful ``process`` must emit exactly what running it sequentially, one tuple at a time, emits:
the same tuples in the same order, whatever the threads, processes, replicas or policy. Each flow
here is a list of :class:`Stage` values; one builds the flow, the other is the sequential reference
(:func:`sequential`), which pushes each input tuple through every stage before the next one is read
and runs the ``on_end`` hooks stage by stage at the end, each key's in first-seen order.

The per-key states are mutable (lists, dicts mutated in place): a state shared between keys, or
a key's tuples reaching two instances out of order, changes the outputs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

import elastream as es

pytestmark = pytest.mark.timeout(60)

N = 2000
KEYS = 17
RUN_KW = dict(max_queue_size=32, batch_size=16, seed=3)


@dataclass(frozen=True)
class Stage:
    """One operator of a linear flow: ``transform`` is a Stream method name, ``key`` a key_by's key."""

    transform: str  # map | filter | flat_map | reduce | keyed_process | process
    fn: Callable[..., Any]
    key: Callable[[Any], Any] | None = None
    state: Callable[[], Any] | None = None
    on_end: Callable[..., Iterable[Any]] | None = None
    partitions: int = 1

    def add_to(self, stream: Any, name: str) -> Any:
        """This stage appended to ``stream`` (a fluent Stream), named ``name``."""
        if self.transform in ("map", "filter", "flat_map"):
            return getattr(stream, self.transform)(self.fn, name=name)
        if self.transform == "reduce":
            return stream.key_by(self.key, partitions=self.partitions).reduce(self.fn, initial=self.state, name=name)
        if self.transform == "keyed_process":
            return stream.key_by(self.key, partitions=self.partitions).process(
                self.fn, state=self.state, on_end=self.on_end, name=name)
        assert self.transform == "process"
        return stream.process(self.fn, state=self.state, on_end=self.on_end, name=name)


class Reference:
    """The sequential semantics of one stage, one tuple at a time (fresh state per reference)."""

    def __init__(self, stage: Stage):
        self.stage = stage
        self.states: dict[Any, Any] = {}  # key -> state, in first-seen order (None: the whole stream)

    def feed(self, x: Any) -> list[Any]:
        s = self.stage
        if s.transform == "map":
            return [s.fn(x)]
        if s.transform == "filter":
            return [x] if s.fn(x) else []
        if s.transform == "flat_map":
            return list(s.fn(x))
        key = s.key(x) if s.key is not None else None
        if s.transform == "reduce":
            if key in self.states:
                acc = s.fn(self.states[key], x)
            else:
                acc = s.fn(s.state(), x) if s.state is not None else x
            self.states[key] = acc
            return [(key, acc)]
        if key not in self.states:
            self.states[key] = s.state()
        self.states[key], outputs = s.fn(self.states[key], x)
        return list(outputs)

    def end(self) -> list[Any]:
        s = self.stage
        if s.on_end is None:
            return []
        if s.transform == "keyed_process":
            return [y for key, state in self.states.items() for y in s.on_end(key, state)]
        return list(s.on_end(self.states[None] if None in self.states else s.state()))


def sequential(items: Iterable[Any], stages: list[Stage]) -> list[Any]:
    """What the stages emit run one tuple at a time: each input through every stage, then the ends in order."""
    refs = [Reference(s) for s in stages]

    def through(xs: list[Any], rest: list[Reference]) -> list[Any]:
        for ref in rest:
            xs = [y for x in xs for y in ref.feed(x)]
        return xs

    out = []
    for x in items:
        out.extend(through([x], refs))
    for i, ref in enumerate(refs):
        out.extend(through(ref.end(), refs[i + 1:]))
    return out


def build(name: str, items: list[Any], stages: list[Stage]) -> es.Flow:
    flow = es.Flow(name)
    stream = flow.source(es.ops.FromIterable(items), name="src")
    for i, stage in enumerate(stages):
        stream = stage.add_to(stream, f"s{i}-{stage.transform}")
    stream.sink(es.ops.Collect(), name="out")
    return flow


def events(seed: int = 7) -> list[tuple[int, int]]:
    """(key, value) pairs: keys skewed (some keys far more frequent), values counting up."""
    rng = random.Random(seed)
    return [(min(rng.randrange(KEYS), rng.randrange(KEYS)), i) for i in range(N)]


# -- steps (module level: the process modes pickle them) ------------------------------------------------------

def key_of(e):
    return e[0]


def scaled(e):
    return (e[0], e[1] * 3 + 1)


def not_multiple_of_5(e):
    return e[1] % 5 != 0


def fan_out(e):
    """Zero, one or two outputs per input."""
    return [(e[0], e[1], j) for j in range(e[1] % 3)]


def add_value(acc, e):
    return acc + e[1]


def max_event(acc, e):
    return e if e[1] % 97 > acc[1] % 97 else acc


def append_seen(seen: list, e):
    """Per-key list mutated in place: the outputs show the key's own history."""
    seen.append(e[1])
    return seen, [(e[0], len(seen), seen[0], sum(seen[-3:]))]


def ends_of_lists(key, seen: list):
    return [(key, "end", tuple(seen))]


def count_parities(counts: dict, e):
    """Per-key dict mutated in place; every third tuple of a key also emits the dict's items."""
    counts[e[1] % 2] = counts.get(e[1] % 2, 0) + 1
    total = sum(counts.values())
    out = [(e[0], counts.get(0, 0), counts.get(1, 0))]
    if total % 3 == 0:
        out.append((e[0], tuple(sorted(counts.items()))))
    return counts, out


def last_three(window: list, x):
    """A whole-stream sliding window of three (one mutable list): emits the window each time it is full."""
    window.append(x)
    if len(window) > 3:
        del window[0]
    return window, ([tuple(window)] if len(window) == 3 else [])


def window_end(window: list):
    return [("end", tuple(window))]


def pair_of(t):
    return (t[0], t[1])


def bucket_of(e):
    return e[1] % 4


# -- flows ---------------------------------------------------------------------------------------------------

FLOWS: dict[str, list[Stage]] = {
    "stateless": [Stage("map", scaled), Stage("filter", not_multiple_of_5), Stage("flat_map", fan_out)],
    "reduce": [Stage("map", scaled), Stage("reduce", add_value, key=key_of, state=int),
               Stage("reduce", max_event, key=key_of, partitions=4)],
    "keyed_list_state": [Stage("filter", not_multiple_of_5),
                         Stage("keyed_process", append_seen, key=key_of, state=list, on_end=ends_of_lists,
                               partitions=4)],
    "keyed_dict_state": [Stage("keyed_process", count_parities, key=key_of, state=dict),
                         Stage("filter", lambda t: len(t) == 3), Stage("map", pair_of)],
    "stateful_process": [Stage("map", scaled), Stage("process", last_three, state=list, on_end=window_end)],
    "mixed": [Stage("map", scaled), Stage("reduce", add_value, key=key_of, state=int),
              Stage("flat_map", lambda kv: [kv] * (kv[1] % 2 + 1)),
              Stage("keyed_process", count_parities, key=bucket_of, state=dict, partitions=4),
              Stage("process", last_three, state=list)],
}


def test_reference_is_one_tuple_at_a_time():
    """The reference itself: a keyed list state with an end hook, by hand."""
    stages = [Stage("keyed_process", append_seen, key=key_of, state=list, on_end=ends_of_lists)]
    assert sequential([(1, 10), (2, 20), (1, 30)], stages) == [
        (1, 1, 10, 10), (2, 1, 20, 20), (1, 2, 10, 40), (1, "end", (10, 30)), (2, "end", (20,))]
    assert sequential([(0, 1), (0, 2)], [Stage("reduce", add_value, key=key_of, state=int)]) == [(0, 1), (0, 3)]
    # Without an initial, a key's first tuple is its accumulator.
    assert sequential([(0, 1), (0, 5), (0, 2)], [Stage("reduce", max_event, key=key_of)]) == [
        (0, (0, 1)), (0, (0, 5)), (0, (0, 5))]


@pytest.mark.parametrize("flow_name", list(FLOWS))
def test_outputs_equal_the_sequential_reference_in_order(flow_name, policy, execution_mode):
    items = events()
    stages = FLOWS[flow_name]
    expected = sequential(items, stages)
    result = execution_mode.run(build(flow_name, items, stages), policy=policy, **RUN_KW)
    out = result.outputs["out"]
    assert len(out) == len(expected)
    first_difference = next((i for i, (a, b) in enumerate(zip(out, expected)) if a != b), None)
    assert first_difference is None, (
        f"output {first_difference} differs: got {out[first_difference]!r}, want {expected[first_difference]!r}")
