"""Partition moves when an ordered split's active replicas change (elasticity's ``SetReplicas``).

A replica that leaves hands every key group it owns to the ones that stay
(:func:`handover_moves`); one that joins gets its share of the recent load at
once (:func:`joining_moves`), so a DS2 decision takes effect in one step
rather than one partition per balancing decision. The moves themselves — the
state exported, carried and imported, the held tuples — are the balancing's
(:class:`~elastream.ordered.rebalance.SplitBalancing`).

Threading: pure functions, called by the split's worker.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def handover_moves(table: list[int], load: list[int], leaving: int,
                   active: Sequence[int]) -> list[tuple[int, int, int]]:
    """Moves that give every partition of replica ``leaving`` to the ``active`` ones, evening out their load.

    Largest partitions first, each to the active replica with the least load so far (partitions
    with no recent load count as one tuple, so that they spread too).
    """
    owned = {r: 0 for r in active}
    for p, r in enumerate(table):
        if r in owned:
            owned[r] += load[p]
    moves = []
    for p in sorted((p for p, r in enumerate(table) if r == leaving), key=lambda p: (-load[p], p)):
        target = min(active, key=owned.__getitem__)
        owned[target] += max(1, load[p])
        moves.append((p, leaving, target))
    return moves


def joining_moves(rates: list[float | None], table: list[int], load: list[int], joining: Collection[int],
                  active: Sequence[int]) -> list[tuple[int, int, int]]:
    """Moves that give replicas ``joining`` (no rate measured yet) their share of the recent load at once.

    A joining replica is taken to be as fast as the mean of the measured
    ones (all equal when none is measured): DS2's one step instead of one
    partition per decision; the rates then correct the shares. Largest
    partitions first, from whichever replica carries the most above its share; with no recent load
    at all, an even share of the key groups by number.
    """
    known = [r for r in (rates[i] for i in active if i not in joining) if r]
    assumed = sum(known) / len(known) if known else 1.0
    speed = {r: (assumed if r in joining or not rates[r] else rates[r]) for r in active}
    total = sum(load[p] for p, r in enumerate(table) if r in speed)
    if total <= 0:  # no recent load to go by: an even share of the key groups by number
        owned = [p for p, r in enumerate(table) if r in speed and r not in joining]
        slots = sorted(active)
        return [(p, table[p], slots[i % len(slots)]) for i, p in enumerate(owned) if slots[i % len(slots)] in joining]
    share = {r: total * speed[r] / sum(speed.values()) for r in active}
    owned = {r: 0.0 for r in active}
    for p, r in enumerate(table):
        if r in owned:
            owned[r] += load[p]
    moves = []
    for p in sorted((p for p, r in enumerate(table) if r in owned and r not in joining and load[p] > 0),
                    key=lambda p: (-load[p], p)):
        source = table[p]
        target = min(joining, key=lambda r: owned[r] - share[r])
        gap = min(owned[source] - share[source], share[target] - owned[target])
        if load[p] < 2 * gap:  # the two get closer to their shares
            moves.append((p, source, target))
            owned[source] -= load[p]
            owned[target] += load[p]
    return moves
