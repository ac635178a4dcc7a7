"""The control channel: reconfiguration decisions carried to the part that hosts them, and their answers.

The parent's :meth:`~elastream.processes.supervisor.ProcessRunHandle.submit`
routes each decision to one part (:func:`target_process`): ``SetThreads`` to
the process it names, ``SetReplicas`` / ``MoveKeyGroups`` to the process that
hosts the operator's ordered split, ``Fuse`` / ``Unfuse`` to the process that runs
the chain's operators (its engine regroups its own tasks). A worker applies it at its control loop
(the local part at once) with :func:`apply_in_part` and answers with a
:class:`~elastream.processes.messages.ControlResult`; :class:`PendingReplies`
matches the answers to the waiting callers.

Threading: :func:`apply_in_part` runs in the thread that owns the part's control
(a worker's main thread, or the caller's thread for the local part).
:class:`PendingReplies` is called from the callers' threads (``expect`` /
``wait``) and the supervisor thread (``answer`` / ``abandon``); one lock guards it.
"""

from __future__ import annotations

import itertools
import threading
from time import perf_counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from elastream.processes.messages import ControlResult
from elastream.runtime.decisions import MOVED_WHOLE, Decision, Fuse, MoveKeyGroups, SetReplicas, SetThreads, Unfuse

#: How long ``submit`` waits for a worker's answer before recording the decision as unanswered.
REPLY_TIMEOUT_S = 5.0
NOT_YET = "is not applied while a flow runs yet"


def target_process(decision: Decision, assignment: Mapping[str, int]) -> int | str:
    """The process that applies ``decision``, or why none does (a string).

    Example: ``target_process(SetThreads(2, process=1), {}) == 1``
    """
    if isinstance(decision, SetThreads):
        return decision.process
    if isinstance(decision, (SetReplicas, MoveKeyGroups)):
        from elastream.processes.replicate import split_name

        split = split_name(decision.operator)
        if split not in assignment:
            return f"operator {decision.operator!r} is not replicated in this run"
        return assignment[split]
    if isinstance(decision, (Fuse, Unfuse)):
        return chain_process(decision.chain, assignment)
    return f"unknown decision {type(decision).__name__}"


def chain_process(chain: Sequence[str], assignment: Mapping[str, int]) -> int | str:
    """The process that runs every operator of ``chain`` (a part regroups its own tasks), or why none does.

    Example: ``chain_process(("a", "b"), {"a": 1, "b": 0})`` names the two processes: a chain is fused
    within one process.
    """
    missing = [name for name in chain if name not in assignment]
    if missing:
        return f"operator {missing[0]!r} does not run as an operator of its own in this run"
    processes = sorted({assignment[name] for name in chain})
    if len(processes) > 1:
        return (f"{' → '.join(chain)} runs over processes {', '.join(map(str, processes))}: "
                "a chain is fused within one process")
    return processes[0]


def apply_in_part(handle: Any, decision: Decision) -> ControlResult:
    """Apply ``decision`` to one part's threads handle (the part is process 0 of its own engine), with
    the time it took as its pause unless it measured its own. The ticket of the answer is 0: the caller sets it."""
    began = perf_counter()
    result = _apply_in_part(handle, decision)
    if result.pause_ms is not None:  # the decision measured what its streams waited (a splice)
        return result
    return replace(result, pause_ms=(perf_counter() - began) * 1000.0)


def _apply_in_part(handle: Any, decision: Decision) -> ControlResult:
    if isinstance(decision, SetThreads):
        try:
            applied = handle.submit([replace(decision, process=0)])[0]
        except ValueError as error:  # e.g. fewer than one thread
            return ControlResult(0, False, str(error))
        return ControlResult(0, applied.ok, applied.why, pause_ms=applied.pause_ms)
    if isinstance(decision, SetReplicas):
        return set_active_replicas(handle, decision)
    if isinstance(decision, (Fuse, Unfuse)):  # the part's engine regroups its tasks (runtime.refuse)
        applied = handle.submit([decision])[0]
        return ControlResult(0, applied.ok, applied.why, pause_ms=applied.pause_ms)
    return ControlResult(0, False, f"{type(decision).__name__} of {decision.operator!r} {NOT_YET}")


def set_active_replicas(handle: Any, decision: SetReplicas) -> ControlResult:
    """Let ``decision.count`` replicas of an operator take work (C-Stream §4.2, DS2's count): those it names,
    or the first ones.

    A stateless unit still running through its bypass and asked for one replica in another process moves
    there whole instead (:meth:`~elastream.runtime.bypass.Bypasses.move`): no split or merge is left on its
    way. (A keyed one goes through its split, whose key groups carry their state.)

    The replicas are held ready (started with the run, one per process); the split in this part
    routes new batches only to the active ones from its next batch on, and one that leaves
    finishes what it holds, so no tuple is lost or reordered. A keyed split moves key groups, with
    their state: those of a leaving replica to the others, a share of them to a joining one (then
    it balances them by the replicas' measured rates on its own). One whose state cannot move refuses.
    """
    from elastream.ordered.replicate import split_name

    try:
        split = handle.operator(split_name(decision.operator))
    except KeyError:
        return ControlResult(0, False, f"no split of {decision.operator!r} runs in this process")
    if split.key is not None and not split.moves_enabled:
        return ControlResult(0, False, f"{decision.operator!r} is keyed and its key groups' state cannot move: "
                                       f"its {split.n_outputs} replicas keep their key groups")
    count = max(1, min(decision.count, split.n_outputs))
    chosen = list(range(count))
    if decision.replicas is not None:
        chosen = sorted(set(decision.replicas))
        if len(chosen) != decision.count or not all(0 <= r < split.n_outputs for r in chosen):
            return ControlResult(0, False, f"replicas {list(decision.replicas)} are not {decision.count} of "
                                           f"0..{split.n_outputs - 1}")
    moved = handle.moved_to(decision.operator)
    if moved is not None:
        return ControlResult(0, chosen == [moved], MOVED_WHOLE if chosen == [moved] else
                             f"{decision.operator!r} runs whole where its replica {moved} is: it cannot spread again")
    if len(chosen) == 1 and chosen != [0] and split.key is None and handle.bypassed(decision.operator):
        done, why, paused_s = handle.move(decision.operator, chosen[0])
        return ControlResult(0, done, MOVED_WHOLE if done else why, pause_ms=paused_s * 1000.0 if done else None)
    paused_s = None  # no splice: the split changes its routing between two batches (the time taken is the pause)
    if chosen != [0]:
        spliced, why, paused_s = handle.splice(decision.operator)
        if not spliced:
            return ControlResult(0, False, why)
    split.set_active(chosen)
    if count != decision.count:
        return ControlResult(0, False, f"{split.n_outputs} replicas are held ready: {count} take work")
    return ControlResult(0, True, "", pause_ms=None if paused_s is None else paused_s * 1000.0)


@dataclass(slots=True)
class _Waiter:
    process: int
    done: threading.Event = field(default_factory=threading.Event)
    result: ControlResult | None = None


class PendingReplies:
    """Tickets of decisions sent to workers and not answered yet."""

    def __init__(self) -> None:
        self._tickets = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._lock = threading.Lock()

    def expect(self, process: int) -> int:
        """A new ticket for a decision about to be sent to ``process``."""
        with self._lock:
            ticket = next(self._tickets)
            self._waiting[ticket] = _Waiter(process)
        return ticket

    def answer(self, reply: ControlResult) -> None:
        """Record a worker's answer (an unknown ticket, e.g. one that timed out, is dropped)."""
        with self._lock:
            waiter = self._waiting.get(reply.ticket)
        if waiter is not None:
            waiter.result = reply
            waiter.done.set()

    def abandon(self, process: int | None, why: str) -> None:
        """Answer every ticket of ``process`` (None: of every process) with ``why`` (it ended before answering)."""
        with self._lock:
            waiters = [(t, w) for t, w in self._waiting.items() if process is None or w.process == process]
        for ticket, waiter in waiters:
            waiter.result = ControlResult(ticket, False, why)
            waiter.done.set()

    def wait(self, ticket: int, timeout: float = REPLY_TIMEOUT_S) -> ControlResult:
        """The answer to ``ticket``, or a failed one after ``timeout`` s; the ticket is forgotten either way."""
        with self._lock:
            waiter = self._waiting[ticket]
        try:
            if waiter.done.wait(timeout) and waiter.result is not None:
                return waiter.result
            return ControlResult(ticket, False, f"process {waiter.process} did not answer within {timeout} s")
        finally:
            with self._lock:
                self._waiting.pop(ticket, None)
