"""The scheduler's ready set, and how a policy's index follows it without a scan.

``Scheduler.ready`` is a dict of the READY tasks in the order they became ready, each mapped to its
*arrival stamp*: a number from :func:`next_stamp`, larger than every stamp before it. Every writer
of the set stores one (:func:`add_ready`; the scheduler's hot path inlines it), so

* the newest arrivals are the dict's last entries: a policy's index (``policy.ready_index()``,
  see :mod:`elastream.policies.ready_index`) catches up at a pick by walking the dict backwards
  until it meets a stamp it has already seen — O(arrivals since the last pick), no scan;
* an index entry is valid only while ``ready.get(task)`` still equals the stamp it was made with,
  so a task taken, held, parked or re-added leaves a stale entry that the index drops when it
  meets it. Deletions stay plain dict deletions and tell nobody.

An insertion costs one call of a C counter more than before; a policy without an index (``ibm``,
``random``, user policies) and the dedicated model (no picks) never read the stamps.

Threading: every write happens with the scheduler's lock held, as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

#: The next arrival stamp (a C counter: atomic under the GIL, shared by every scheduler; each set's
#: stamps still grow in its insertion order).
next_stamp = itertools.count(1).__next__


def add_ready(ready: dict, task: Any) -> None:
    """Put ``task`` in the ready set unless it is there already (its first arrival then stands)."""
    if task not in ready:
        ready[task] = next_stamp()


def reorder(ready: dict, order: Iterable[Any]) -> None:
    """Put the READY tasks in ``order`` (the same tasks): they arrive again, in that order (an index's ties)."""
    ready.clear()
    for task in order:
        ready[task] = next_stamp()


def new_ready_set(policy: Any) -> dict:
    """An empty ready set, followed by ``policy``'s index when the policy offers one (``ready_index()``)."""
    ready: dict = {}
    make_index = getattr(policy, "ready_index", None)
    if make_index is not None:
        make_index().attach(ready)
    return ready
