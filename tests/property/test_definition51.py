"""Ordered-multicore Definition 5.1 as a property: whatever the execution, a linear pipeline of
stateless / partitioned / stateful function operators emits exactly the output sequence of a
sequential one-tuple-at-a-time execution.

Generated: 1-5 stages of every kind (map, filter, flat_map; key_by().process() with and
without on_end, key_by().reduce() and key_by().window(Tumbling).aggregate(); process(kind="stateful")) with selectivity 0, 1/2, 1, 2 or value-dependent
0..2; a policy among ``es.policies.available()``; 1-8 worker threads; 1 or 2 processes. With 2
processes each operator goes to a random process, and in both cases stateless / partitioned stages
are replicated at random (C-Stream §4.2: ordered split, replicas, ordered merge; in one process
the replicas share it, with two they are spread over both).
The reference is a plain-Python loop over the same stage specs, not the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastream as es
from flow_deadline import run_with_deadline
from elastream.ordered.replicate import parse_replica_name, replica_name, replicate_flow

pytestmark = pytest.mark.timeout(240)

MOD = 1_000_003
SELECTIVITIES = ("0", "1/2", "1", "2", "0..2")
KINDS = ("map", "filter", "flat_map", "keyed", "keyed_end", "reduce", "window", "stateful")
REPLICABLE = ("map", "filter", "flat_map", "keyed", "keyed_end", "reduce", "window")
#: Tumbling window size of "window" stages; a value is its tuple's event time (values are not ordered:
#: many tuples come late).
WINDOW = 250


def times(v: int, sel: str) -> int:
    """How many outputs an input of value ``v`` yields under selectivity ``sel``."""
    if sel == "0..2":
        return v % 3
    if sel == "1/2":
        return 1 - v % 2
    return {"0": 0, "1": 1, "2": 2}[sel]


def mix(v: int, salt: int) -> int:
    return (v * 31 + salt) % MOD


@dataclass(frozen=True)
class Stage:
    """One operator of a generated pipeline; values are ``(key, value)`` pairs."""

    kind: str
    sel: str = "1"
    salt: int = 0
    partitions: int = 1

    def add_to(self, stream, name: str):
        """Append this stage to a fluent stream (closures capture plain data: cloudpickle ships them)."""
        sel, salt = self.sel, self.salt
        if self.kind == "map":
            return stream.map(lambda e: (e[0], mix(e[1], salt)), name=name)
        if self.kind == "filter":
            return stream.filter(lambda e: times(e[1], sel) > 0, name=name)
        if self.kind == "flat_map":
            return stream.flat_map(lambda e: [(e[0], mix(e[1], salt))] * times(e[1], sel), name=name)
        keyed = stream.key_by(lambda e: e[0], partitions=self.partitions)
        if self.kind in ("keyed", "keyed_end"):
            return keyed.process(lambda n, e: ((n + e[1]) % MOD, [(e[0], (n + e[1] + salt) % MOD)] * times(e[1], sel)),
                                 state=int, name=name,
                                 on_end=(lambda k, n: [(k, (n + salt) % MOD)]) if self.kind == "keyed_end" else None)
        if self.kind == "reduce":
            return keyed.reduce(lambda a, e: (a + e[1] + salt) % MOD, initial=int, name=name)
        if self.kind == "window":
            return keyed.window(es.ops.Tumbling(WINDOW), time=lambda e: e[1]) \
                .aggregate(lambda a, e: (a + e[1] + salt) % MOD, initial=int, name=name) \
                .map(lambda r: (r.key, (int(r.start) + r.value) % MOD), name=f"{name}-pairs")
        return stream.process(lambda t, e: ((t + e[1]) % MOD, [(e[0], (t + e[1]) % MOD)] * times(e[1], sel)),
                              state=int, name=name)


def reference(stages: tuple[Stage, ...], data: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sequential one-tuple-at-a-time execution of the stage specs in plain Python."""
    stream = data
    for s in stages:
        if s.kind == "window":
            stream = windows_reference(stream, s.salt)
            continue
        out: list[tuple[int, int]] = []
        state: dict[int, int] = {}
        total = 0
        for k, v in stream:
            if s.kind == "map":
                out.append((k, mix(v, s.salt)))
            elif s.kind == "filter":
                if times(v, s.sel) > 0:
                    out.append((k, v))
            elif s.kind == "flat_map":
                out += [(k, mix(v, s.salt))] * times(v, s.sel)
            elif s.kind in ("keyed", "keyed_end"):
                state[k] = (state.get(k, 0) + v) % MOD
                out += [(k, (state[k] + s.salt) % MOD)] * times(v, s.sel)
            elif s.kind == "reduce":
                state[k] = (state.get(k, 0) + v + s.salt) % MOD
                out.append((k, state[k]))
            else:
                total = (total + v) % MOD
                out += [(k, total)] * times(v, s.sel)
        if s.kind == "keyed_end":  # on_end: every key in first-seen order (dicts keep insertion order)
            out += [(k, (n + s.salt) % MOD) for k, n in state.items()]
        stream = out
    return stream


def windows_reference(stream: list[tuple[int, int]], salt: int) -> list[tuple[int, int]]:
    """Tumbling windows per key, emitted when the key's next tuple passes their end, the rest at the end;
    a tuple whose window its key has passed is dropped."""
    out: list[tuple[int, int]] = []
    open_: dict[int, dict[int, int]] = {}
    latest: dict[int, int] = {}
    for k, v in stream:
        windows = open_.setdefault(k, {})
        for start in sorted(w for w in windows if w + WINDOW <= v):
            out.append((k, (start + windows.pop(start)) % MOD))
        start = v // WINDOW * WINDOW
        if k not in latest or start + WINDOW > latest[k]:
            windows[start] = (windows.get(start, 0) + v + salt) % MOD
        latest[k] = max(latest.get(k, v), v)
    for k, windows in open_.items():
        out += [(k, (start + windows[start]) % MOD) for start in sorted(windows)]
    return out


@st.composite
def stages(draw) -> tuple[Stage, ...]:
    result = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(KINDS))
        sel = "1" if kind in ("map", "reduce", "window") else draw(st.sampled_from(SELECTIVITIES))
        if kind == "filter" and sel in ("2", "0..2"):
            sel = "1/2"
        result.append(Stage(kind, sel, draw(st.integers(0, 99)), draw(st.integers(1, 4))))
    return tuple(result)


@st.composite
def inputs(draw) -> list[tuple[int, int]]:
    keys = draw(st.integers(1, 12))
    n = draw(st.integers(0, 300))
    start = draw(st.integers(0, 1000))
    return [((start + 7 * i) % keys, (start + 37 * i) % 2001) for i in range(n)]


def build(spec: tuple[Stage, ...], data: list[tuple[int, int]]) -> es.Flow:
    flow = es.Flow("def51")
    s = flow.source(es.ops.FromIterable(data), name="src")
    for i, stage in enumerate(spec):
        s = stage.add_to(s, f"s{i}")
    s.sink(es.ops.Collect(), name="out")
    return flow


def check(spec, data, policy, threads, seed, queue, batch, replicas=None, chunk=256, **runner_kw) -> None:
    """The flow's output equals the reference; ``replicas`` are rewritten in one process unless ``processes=2``."""
    flow = build(spec, data)
    if replicas and runner_kw.get("processes", 1) == 1:
        flow = replicate_flow(flow, replicas, chunk=chunk)
    elif replicas:
        runner_kw["replicas"] = replicas
    result = run_with_deadline(flow, timeout=60, policy=policy, threads=threads, seed=seed,
                               max_queue_size=queue, batch_size=batch, **runner_kw)
    assert result.outputs["out"] == reference(spec, data)


@st.composite
def replica_counts(draw, spec: tuple[Stage, ...]) -> dict[str, int]:
    """1-3 replicas for some replicable stages (in one process: split, replicas and merge share it)."""
    counts = {}
    for i, stage in enumerate(spec):
        if stage.kind in REPLICABLE and draw(st.booleans()):
            bound = 3 if stage.kind in ("map", "filter", "flat_map") else min(3, stage.partitions)
            counts[f"s{i}"] = draw(st.integers(1, bound))
    return counts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=stages(), rows=inputs(), policy=st.sampled_from(es.policies.available()),
       threads=st.integers(1, 8), seed=st.integers(0, 2**16), queue=st.integers(1, 64),
       batch=st.integers(1, 64), chunk=st.integers(1, 64))
def test_one_process_equals_sequential_execution(data, spec, rows, policy, threads, seed, queue, batch, chunk):
    replicas = data.draw(replica_counts(spec), label="replicas")
    check(spec, rows, policy, threads, seed, queue, batch, replicas=replicas, chunk=chunk)


@st.composite
def placements(draw, spec: tuple[Stage, ...]) -> dict[str, int]:
    """Each operator on a random process; replicable stages get 1-3 replicas on random processes."""
    proc = st.integers(0, 1)
    plan = {"src": draw(proc), "out": draw(proc)}
    for i, stage in enumerate(spec):
        name = f"s{i}"
        plan[name] = draw(proc)
        if stage.kind in REPLICABLE and draw(st.booleans()):
            bound = 3 if stage.kind in ("map", "filter", "flat_map") else min(3, stage.partitions)
            for r in range(draw(st.integers(1, bound))):
                plan[replica_name(name, r)] = draw(proc)
            if stage.kind in ("keyed_end", "window"):  # on_end: the split and the merge share the keys' order
                plan[f"{name}#split"] = plan[f"{name}#merge"] = draw(proc)
        if stage.kind == "window":
            plan[f"{name}-pairs"] = draw(proc)
    return plan


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), spec=stages(), rows=inputs(), policy=st.sampled_from(es.policies.available()),
       threads=st.integers(1, 8), seed=st.integers(0, 2**16), queue=st.integers(1, 64), batch=st.integers(1, 64))
@pytest.mark.slow
def test_two_processes_with_replicas_equal_sequential_execution(data, spec, rows, policy, threads, seed, queue,
                                                                 batch):
    plan = data.draw(placements(spec), label="placement")
    counts: dict[str, int] = {}
    for name in plan:
        parsed = parse_replica_name(name)
        if parsed is not None:
            counts[parsed[0]] = max(counts.get(parsed[0], 0), parsed[1] + 1)
    check(spec, rows, policy, threads, seed, queue, batch, processes=2, placement=plan, replicas=counts or None,
          process_options=es.ProcessConfig(start_method="forkserver"))
