"""A Haren policy as a record: the two functions ``f`` and ``g``, the features they read, and P, b, d (§4).

* ``g(op, features) -> priority vector`` (intra-thread, §4.1): a tuple of numbers (a plain number is
  a one-dimensional vector); a worker runs the operators of its list by these vectors compared
  lexicographically, the highest first;
* ``f(op, features, workers, rng) -> worker`` (inter-thread): which of the ``workers`` workers'
  lists (0 .. workers-1) the operator is on until the next scheduling task; the default spreads
  the operators at random, as in the paper's evaluation (§7.2).

``op`` is an :class:`~elastream.policies.haren.operators.OperatorView` (index, name, neighbours,
query, priority class); ``features`` the :class:`~elastream.policies.haren.features.FeatureTable`
(``features["cost"][op.index]``). Both functions may read any operator's features.

Example (a policy running the operators with the most queued tuples first)::

    from elastream.policies.haren import Feature, register_feature, register_haren

    register_feature(Feature("queued", lambda op, old, now: float(op.task.queued), dependent=True,
                             execution_intrinsic=False, spreads_to="downstream"))
    register_haren("longest_queue", g=lambda op, F: (F["queued"][op.index],), features=("queued",))
    es.Runner(threads=2, policy="haren:longest_queue").run(flow)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from elastream.policies.haren.features import FeatureTable, feature
from elastream.policies.haren.operators import OperatorView

Priority = Callable[[OperatorView, FeatureTable], Any]
Assign = Callable[[OperatorView, FeatureTable, int, random.Random], int]

#: Scheduling period P (s): the paper's evaluation value (§7.2).
DEFAULT_PERIOD_S = 0.100
#: Batch size b: tuples per execution of an operator (§7.2).
DEFAULT_BATCH = 10
#: Delay d (s) after which an operator whose execution-intrinsic features must stay fresh is run
#: anyway. Chosen by measurement: Multi-class scenario 2 at d = 0.25, 0.5, 1, 2 and 4 s
#: (``elastream bench haren --scenarios delays``; the numbers are in docs/haren.md and
#: bench/results/haren/delays.json): at 0.25 s the starved LOW operators run ahead of HIGH ones
#: several times as often and HIGH's max latency is the worst; from 0.5 s up it no longer improves.
#: 1 s keeps the costs and selectivities of rarely run operators at most a second old.
DEFAULT_DELAY_S = 1.0
#: A coroutine operator cannot be stopped after b tuples (it pushes them itself): it is preempted at
#: its first push or satisfied wait after this budget instead.
COROUTINE_QUANTUM_S = 0.001


def assign_random(op: OperatorView, features: FeatureTable, workers: int, rng: random.Random) -> int:
    """The paper's inter-thread function in every experiment (§7.2): a random worker per operator."""
    return rng.randrange(workers)


@dataclass(frozen=True)
class HarenSpec:
    """One policy: ``g``, ``f``, the features they read, and the parameters P, b and d."""

    name: str
    g: Priority
    features: tuple[str, ...]
    f: Assign = assign_random
    period_s: float = DEFAULT_PERIOD_S
    batch_size: int = DEFAULT_BATCH
    delay_s: float = DEFAULT_DELAY_S
    dimensions: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"Haren policy {self.name!r}: the scheduling period must be > 0 s")
        if self.batch_size < 1:
            raise ValueError(f"Haren policy {self.name!r}: the batch size must be >= 1 tuple")
        if not self.delay_s > 0:
            raise ValueError(f"Haren policy {self.name!r}: the delay d must be > 0 s")
        for name in self.features:
            feature(name)  # fail at registration on an unknown feature

    def resolved_features(self) -> list:
        """The :class:`~elastream.policies.haren.features.Feature` records this policy reads."""
        return [feature(name) for name in self.features]


def as_vector(value: Any) -> tuple:
    """``g``'s result as a priority vector (a plain number is one dimension)."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, (int, float)):
        return (value,)
    return tuple(value)


def with_parameters(spec: HarenSpec, *, period_s: float | None = None, batch_size: int | None = None,
                    delay_s: float | None = None, f: Assign | None = None,
                    features: Sequence[str] | None = None) -> HarenSpec:
    """A copy of ``spec`` with other parameters (what a benchmark varies)."""
    from dataclasses import replace

    changes: dict[str, Any] = {}
    for key, value in (("period_s", period_s), ("batch_size", batch_size), ("delay_s", delay_s), ("f", f),
                       ("features", None if features is None else tuple(features))):
        if value is not None:
            changes[key] = value
    return replace(spec, **changes)
