"""Period snapshots for the controller tests: synthetic ones, and recorded ones saved as JSON and rebuilt.

``tests/data/elastic/record_snapshots.py`` records real runs with
``handle.add_period_listener`` and saves them with :func:`save_periods`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from elastream.metrics.period import OperatorPeriod, PeriodStats, WorkerPeriod

DATA = Path(__file__).resolve().parents[2] / "data" / "elastic"


def save_periods(periods: list[PeriodStats], path: Path, **about: object) -> None:
    """Write ``periods`` as JSON (``about`` says how they were recorded)."""
    doc = {"about": about, "periods": [dataclasses.asdict(p) for p in periods]}
    path.write_text(json.dumps(doc, indent=1))


def load_periods(name: str) -> list[PeriodStats]:
    """The periods saved in ``tests/data/elastic/<name>``, rebuilt."""
    doc = json.loads((DATA / name).read_text())
    return [_period(p) for p in doc["periods"]]


def load_about(name: str) -> dict:
    """How the periods in ``tests/data/elastic/<name>`` were recorded (threads, fused chains, machine CPU...)."""
    return json.loads((DATA / name).read_text())["about"]


def _period(doc: dict) -> PeriodStats:
    operators = {name: OperatorPeriod(**{**op, "key_group_load": tuple(op["key_group_load"])})
                 for name, op in doc["operators"].items()}
    workers = tuple(WorkerPeriod(**w) for w in doc["workers"])
    return PeriodStats(start_s=doc["start_s"], period_s=doc["period_s"], operators=operators, workers=workers)


def op(name: str, kind: str = "stateless", *, n: int = 1000, out: int | None = None, busy: float = 0.01,
       cpu: float | None = None, wb: float = 0.0, queue: int = 0, sent: dict[str, int] | None = None,
       load: tuple[int, ...] = ()) -> OperatorPeriod:
    """One synthetic operator period: ``n`` tuples in (a source: out), ``wb`` seconds write-blocked."""
    out = n if out is None else out
    return OperatorPeriod(name=name, kind=kind, tuples_in=0 if kind == "source" else n, tuples_out=out,
                          busy_s=busy, cpu_s=busy if cpu is None else cpu, read_blocked_s=0.0, write_blocked_s=wb,
                          queue_length=queue, write_blocked_ratio=0.0, sent=sent or {}, key_group_load=load)


def chain_period(costs: dict[str, float], rate: float, *, period_s: float = 1.0, slow_wait: bool = True,
                 threads: int = 1) -> PeriodStats:
    """A source → operators (``costs``: name → busy seconds per tuple) → sink period at ``rate`` tuples/s.

    With ``slow_wait``, everything upstream of the slowest operator waited on a full port all
    period (back-pressure) and everything after it waited for input: the slow one is the bottleneck.
    """
    names = list(costs)
    n = int(rate * period_s)
    slowest = max(names, key=costs.__getitem__)
    before = names[: names.index(slowest)]
    ops = {"src": op("src", "source", n=n, busy=0.001, wb=period_s if slow_wait else 0.0,
                     sent={names[0]: n})}
    for i, name in enumerate(names):
        nxt = names[i + 1] if i + 1 < len(names) else "sink"
        blocked = period_s if (slow_wait and name in before) else 0.0
        ops[name] = op(name, n=n, busy=costs[name] * n, wb=blocked, queue=1024 if name == slowest else 0,
                       sent={nxt: n})
    ops["sink"] = op("sink", "sink", n=n, out=0, busy=0.001)
    busy = sum(o.busy_s for o in ops.values())
    workers = tuple(WorkerPeriod(index=i, busy_s=busy / threads, cpu_s=busy / threads,
                                 utilisation=min(1.0, busy / threads / period_s)) for i in range(threads))
    return PeriodStats(start_s=0.0, period_s=period_s, operators=ops, workers=workers)


def workers_period(threads: int, busy_each: float, cpu_each: float, tuples: int, *,
                   period_s: float = 1.0) -> PeriodStats:
    """A period of ``threads`` workers, each busy ``busy_each`` s on ``cpu_each`` s of CPU, ``tuples`` handled."""
    ops = {"src": op("src", "source", n=tuples, busy=0.001, sent={"work": tuples}),
           "work": op("work", n=tuples, busy=busy_each * threads, cpu=cpu_each * threads, sent={"sink": tuples}),
           "sink": op("sink", "sink", n=tuples, out=0, busy=0.001)}
    workers = tuple(WorkerPeriod(index=i, busy_s=busy_each, cpu_s=cpu_each, utilisation=min(1.0, busy_each / period_s))
                    for i in range(threads))
    return PeriodStats(start_s=0.0, period_s=period_s, operators=ops, workers=workers)


def replicated_period(name: str, replicas: int, rate: float, cost_s: float, *, period_s: float = 1.0,
                      split_wb: float = 0.0, merge_wb: float = 0.0, load: tuple[int, ...] = ()) -> PeriodStats:
    """src → ``name`` as split → ``replicas`` replicas → merge → sink, at ``rate`` tuples/s, ``cost_s`` per tuple.

    Replicas count pieces (one per 64 tuples), not tuples, as the real ones do. The source waits
    as long as the split (``split_wb``): back-pressure reaches it.
    """
    n = int(rate * period_s)
    share = n // replicas
    ops = {"src": op("src", "source", n=n, busy=0.001, wb=split_wb, sent={f"{name}#split": n}),
           f"{name}#split": op(f"{name}#split", "coroutine", n=n, busy=0.002, wb=split_wb,
                               sent={f"{name}#{r}": share // 64 for r in range(replicas)}, load=load)}
    for r in range(replicas):
        ops[f"{name}#{r}"] = op(f"{name}#{r}", n=share // 64, busy=share * cost_s, sent={f"{name}#merge": share // 64})
    ops[f"{name}#merge"] = op(f"{name}#merge", "stateful", n=n // 64, out=n, busy=0.002, wb=merge_wb,
                              sent={"sink": n})
    ops["sink"] = op("sink", "sink", n=n, out=0, busy=0.001)
    workers = (WorkerPeriod(index=0, busy_s=0.5, cpu_s=0.5, utilisation=0.5),)
    return PeriodStats(start_s=0.0, period_s=period_s, operators=ops, workers=workers)


def simulated_chain(costs: dict[str, float], instances: dict[str, int], source_rate: float) -> PeriodStats:
    """One second of a chain src → operators → sink, as a plant model for closed-loop controller tests.

    Each operator handles ``instances[name] / costs[name]`` tuples a second; the chain runs at the
    smallest of those and the source's rate. Upstream of the slowest operator everything waits on a
    full port; a replicated operator appears as its split, replicas and merge.
    """
    capacity = {name: instances.get(name, 1) / cost for name, cost in costs.items()}
    rate = min(source_rate, *capacity.values())
    slowest = min(capacity, key=capacity.__getitem__)
    limited = capacity[slowest] < source_rate
    before = set(list(costs)[: list(costs).index(slowest)]) if limited else set()
    n = int(rate)
    names = list(costs)
    first_in = {names[0]: f"{names[0]}#split" if instances.get(names[0], 1) > 1 else names[0]}
    ops = {"src": op("src", "source", n=n, busy=n / source_rate, wb=(1 - n / source_rate) if limited else 0.0,
                     sent={first_in[names[0]]: n})}
    for i, name in enumerate(names):
        nxt = names[i + 1] if i + 1 < len(names) else "sink"
        target = f"{nxt}#split" if instances.get(nxt, 1) > 1 else nxt
        busy = n * costs[name]
        blocked = max(0.0, 1.0 - busy / instances.get(name, 1)) if name in before else 0.0
        if instances.get(name, 1) == 1:
            ops[name] = op(name, n=n, busy=busy, wb=blocked, sent={target: n})
            continue
        k = instances[name]
        split_wb = 0.8 if (name == slowest and limited) or name in before else 0.0
        ops[f"{name}#split"] = op(f"{name}#split", "coroutine", n=n, busy=0.001, wb=split_wb,
                                  sent={f"{name}#{r}": n // k // 64 for r in range(k)})
        for r in range(k):
            ops[f"{name}#{r}"] = op(f"{name}#{r}", n=n // k // 64, busy=busy / k, sent={f"{name}#merge": n // k // 64})
        ops[f"{name}#merge"] = op(f"{name}#merge", "stateful", n=n // 64, out=n, busy=0.001, wb=blocked,
                                  sent={target: n})
    ops["sink"] = op("sink", "sink", n=n, out=0, busy=0.001)
    workers = (WorkerPeriod(index=0, busy_s=0.5, cpu_s=0.5, utilisation=0.5),)
    return PeriodStats(start_s=0.0, period_s=1.0, operators=ops, workers=workers)
