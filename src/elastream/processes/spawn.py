"""Starting a multi-process run's workers and creating its rings (the parent's side of the start).

:func:`spawn_workers` pickles each worker's spec (an operator that cannot be
pickled is named before any worker starts: :func:`~elastream.processes.spec.pickle_specs`)
and starts one process per spec, from the warm fork helper
(:mod:`~elastream.processes.forkserver`) by default. :func:`create_rings` makes
the run's ring segments; the parent's handles only unlink them, the parts map
and prefault the pages they use.

Threading: called by the thread that starts the run or by the supervisor thread
(held workers), one call at a time per run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterable
from typing import Any

from elastream.processes import forkserver
from elastream.processes.child import child_main
from elastream.processes.child_record import ChildRecord
from elastream.processes.spec import ChildSpec, pickle_specs
from elastream.runtime.config import ProcessConfig


def spawn_workers(specs: list[ChildSpec], config: ProcessConfig, owner: Any, into: list[ChildRecord]) -> None:
    """Start one worker process per spec, appending each record to ``into`` as it starts (so that a caller
    whose start fails half-way can end the ones already running). ``owner`` holds the fork helper."""
    method = config.start_method
    ctx = mp.get_context(method)
    payloads = pickle_specs(specs)  # an operator that cannot go to its worker is named before any starts
    if method == "forkserver":
        forkserver.ensure_fork_server(ctx, payloads)
        forkserver.use_fork_server(owner)
    # A spawned worker inherits this process's environment; a forked one the fork server's.
    environ = dict(os.environ) if method == "forkserver" else None
    for spec, payload in zip(specs, payloads):
        parent_end, child_end = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=child_main, args=(spec.index, payload, child_end, environ),
                           name=f"elastream-proc-{spec.index}", daemon=True)
        try:
            proc.start()
        finally:
            child_end.close()
        into.append(ChildRecord(spec, proc, parent_end))


def warm_fork_server(specs: list[ChildSpec], config: ProcessConfig) -> None:
    """Start the fork helper for workers held ready (``specs``) before any decision needs them.

    Its first start costs about 0.35 s of imports on this VM. A plain ``Runner()`` that started it
    only when DS2 first asked for a held worker kept the whole stream waiting that long: the moved key
    groups' state and tuples sat in the ring until the worker attached. A program usually runs one
    flow, so that first start is the one a user sees. The helper boots on another core while the flow
    runs; the workers themselves still start only when needed (:mod:`~elastream.processes.held_start`).
    """
    if config.start_method != "forkserver" or forkserver.fork_server_running() or not specs:
        return
    try:
        forkserver.ensure_fork_server(mp.get_context("forkserver"), pickle_specs(specs))
    except Exception:  # noqa: BLE001 - only a head start: the workers' own start reports what fails
        return


def create_rings(names: Iterable[str], ring_bytes: int, reserve: bool = True) -> list[Any]:
    """One ring segment per name, each expecting one producer; returns the handles (they only unlink).

    ``reserve=False``: their pages are not given yet (``SharedRing.reserve_pages``), for held workers'.
    """
    from elastream.ipc.ring import SharedRing

    return [SharedRing.create(ring_bytes, name=name, producers=1, prefault=False, reserve=reserve) for name in names]


def remove_rings(rings: Iterable[Any]) -> None:
    """Close and remove each ring segment :func:`create_rings` made (each removed even if closing fails)."""
    for ring in rings:
        try:
            ring.close()
        finally:
            ring.unlink()
