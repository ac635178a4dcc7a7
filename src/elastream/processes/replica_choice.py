"""Which of a unit's replicas take work when a decision lowers their count, in a run over several processes.

A ``SetReplicas(unit, k)`` decision says how many replicas take work, not which:
the split's part would keep the first ``k``, and replica 0 runs in the unit's home
process (:func:`~elastream.processes.replicate.expand_assignment`). On a flow of many
light parallel units (C-Stream Fig. 11: six branches) DS2 finds each unit needs less
than one instance, and every unit left with replica 0 put the whole flow in one
process while the other's core stood idle (0.64 of the best static configuration,
which runs three whole branches in each process).

So the supervisor chooses (:meth:`ActiveReplicas.choose`): the ``k`` replicas in the
processes that the other units' active replicas load least, the home process first
on a tie. Units reduced to one replica then run whole, spread over the processes as
a static plan places whole branches. A run whose workers are held ready (plain
``Runner()``, :mod:`elastream.elastic.held`) keeps the first ``k``: its other
processes start only when a unit needs them.

Threading: used by the thread that submits decisions (the elastic loop's).

Example::

    active = ActiveReplicas({"a#0": 0, "a#1": 1, "b#0": 0, "b#1": 1})
    active.choose(SetReplicas("a", 1))   # SetReplicas("a", 1, replicas=(0,))
    active.choose(SetReplicas("b", 1))   # SetReplicas("b", 1, replicas=(1,)): process 1 is free now
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from elastream.ordered.replicate import parse_replica_name
from elastream.runtime.decisions import Decision, SetReplicas


class ActiveReplicas:
    """The active replicas of every replicated unit of a run, and the choice of which ones a count keeps."""

    def __init__(self, assignment: Mapping[str, int]):
        #: unit → the process of each of its replicas, by replica index.
        self.processes: dict[str, dict[int, int]] = {}
        for name, process in assignment.items():
            parsed = parse_replica_name(name)
            if parsed is not None:
                self.processes.setdefault(parsed[0], {})[parsed[1]] = process
        #: unit → its replicas taking work (every replica at the start of a run not held ready).
        self.active: dict[str, tuple[int, ...]] = {unit: tuple(sorted(by_index))
                                                   for unit, by_index in self.processes.items()}
        self._before: dict[str, tuple[int, ...]] = {}

    def choose_each(self, decisions: Sequence[Decision]) -> list[Decision]:
        """``decisions`` with each ``SetReplicas`` through :meth:`choose`, in order."""
        return [self.choose(d) if isinstance(d, SetReplicas) else d for d in decisions]

    def choose(self, decision: SetReplicas) -> SetReplicas:
        """``decision`` naming the replicas that take work (unchanged when it names them or its unit is unknown).

        The choice counts at once for the next one (the decisions of one period are chosen in turn);
        :meth:`settle` keeps it or puts the unit's earlier replicas back.
        """
        unit = decision.operator
        where = self.processes.get(unit)
        if where is None:
            return decision
        self._before[unit] = self.active[unit]
        if decision.replicas is None and 1 <= decision.count < len(where):
            load = self._load_without(unit)
            ranked = sorted(where, key=lambda r: (load.get(where[r], 0), r))
            decision = replace(decision, replicas=tuple(sorted(ranked[:decision.count])))
        chosen = decision.replicas if decision.replicas is not None else range(min(decision.count, len(where)))
        self.active[unit] = tuple(chosen)
        return decision

    def settle(self, decision: SetReplicas, ok: bool) -> None:
        """Keep the replicas of an applied decision; put the unit's earlier ones back when it failed."""
        before = self._before.pop(decision.operator, None)
        if not ok and before is not None:
            self.active[decision.operator] = before

    def _load_without(self, unit: str) -> dict[int, int]:
        """Active replicas per process, of every unit but ``unit``."""
        load: dict[int, int] = {}
        for other, replicas in self.active.items():
            if other != unit:
                for r in replicas:
                    process = self.processes[other][r]
                    load[process] = load.get(process, 0) + 1
        return load
