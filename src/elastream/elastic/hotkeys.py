"""Hot key groups: what elasticity cannot fix, named.

Partitioned state is divided into key groups, and every tuple of one key
group goes to the one replica that owns it. When one key group carries most
of an operator's load, more replicas cannot help: that replica stays as busy
as before. A keyed split reports its recent routing load per key group
(``key_group_load``); :func:`find_hot_key` finds such a group, and
:class:`HotKeyWatch` names it once in the timeline (a
:class:`~elastream.runtime.decisions.HotKey` record) when it becomes hot.

Threading: :func:`find_hot_key` is pure; a :class:`HotKeyWatch` belongs to one controller.

Example::

    find_hot_key(unit)          # HotKey("sum", group=7, share=0.82, reason=...) or None
"""

from __future__ import annotations

from collections.abc import Iterable

from elastream.elastic.view import Unit
from elastream.runtime.decisions import HotKey

#: "Most of the load": a key group carrying at least this share makes every replica beyond the one
#: holding it nearly useless (at best they split what is left).
HOT_SHARE = 0.5

#: Fewest recent tuples over all key groups before a share means anything (the split's load counts
#: decay at each balancing, so a quiet operator's shares are a handful of tuples).
MIN_LOAD = 100


def find_hot_key(unit: Unit, hot_share: float = HOT_SHARE, min_load: int = MIN_LOAD) -> HotKey | None:
    """The unit's hot key group as a HotKey record, or None when its load is spread (or unknown).

    Example: ``find_hot_key(unit_with_load((900, 50, 50))).group == 0``
    """
    load = unit.key_group_load
    total = sum(load)
    if not load or total < min_load:
        return None
    group = max(range(len(load)), key=load.__getitem__)
    share = load[group] / total
    if share < hot_share:
        return None
    return HotKey(operator=unit.name, group=group, share=round(share, 3),
                  reason=f"key group {group} carries {share:.0%} of {unit.name!r}'s tuples: more replicas "
                         f"cannot help it (all of them go to one replica)")


class HotKeyWatch:
    """Names each hot key group once, when it becomes hot (again after it cooled down)."""

    def __init__(self, hot_share: float = HOT_SHARE, min_load: int = MIN_LOAD):
        self.hot_share = hot_share
        self.min_load = min_load
        self._named: dict[str, int] = {}

    def look(self, units: Iterable[Unit]) -> tuple[list[HotKey], set[str]]:
        """The HotKey records to name now, and every unit that has a hot key group now."""
        new: list[HotKey] = []
        hot: set[str] = set()
        for unit in units:
            found = find_hot_key(unit, self.hot_share, self.min_load)
            if found is None:
                self._named.pop(unit.name, None)
                continue
            hot.add(unit.name)
            if self._named.get(unit.name) != found.group:
                self._named[unit.name] = found.group
                new.append(found)
        return new, hot
