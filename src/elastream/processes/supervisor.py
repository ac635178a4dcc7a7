"""Parent side of a multi-process run: rings, worker processes, failure handling, decisions.

Part 0 runs in the parent itself (:class:`~elastream.processes.local.LocalPart`),
parts 1..P-1 in child processes, so ``processes=P`` uses P processes and the
sources' data and the sinks' results of part 0 never cross a pipe.

Start (the fixed cost of every run, ~20 ms for two processes on the 2-vCPU
VM): the ring names are chosen first and the workers spawned, from a fork
server (:mod:`~elastream.processes.forkserver`) that has already imported and
warmed up what a worker needs; while they boot, this process creates the rings
(pages allocated, not mapped: its handles only unlink), sends each worker
``RingsReady``, and starts part 0 (an elastic ``Runner()``'s held-ready
workers: part 0 first, the workers from the supervisor thread once a decision
needs them: :mod:`~elastream.processes.held_start`). Teardown: the
rings are unlinked as soon as every part has reported its end, while the workers
exit; every worker is joined on every exit path (normal end, an operator's failure, a killed worker,
Ctrl-C in the caller's wait, a failed start, an interpreter exit while the run
goes on: :mod:`~elastream.processes.live_runs`).

Misuse fails before anything starts: a run started at the main script's top
level without ``if __name__ == "__main__":`` (:mod:`~elastream.processes.main_guard`:
every worker would re-run it), an operator bound for a worker that cannot be
pickled (:func:`~elastream.processes.spec.pickle_specs` names it). A worker
that ends without reporting its end fails the run with a ``WorkerProcessError``
(:mod:`~elastream.processes.worker_death`); a run never returns normally
without a part's outputs.

Threading: the user's thread calls :class:`ProcessRunHandle` methods; one
supervisor thread owns the receiving ends of the pipes and the process
sentinels and waits for the local part's end. It dispatches each message
(:mod:`~elastream.processes.messages`) to its handler, notices a dead worker at
once (its sentinel fires), asks every other part to shut down, kills what has
not ended after a grace period, and always unlinks the shared-memory rings.
Sends to a worker are serialised by a per-worker lock (the user's thread sends
decisions, the supervisor shutdowns).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cached_property
from multiprocessing.connection import wait as wait_ready
from time import perf_counter
from typing import Any

from elastream.errors import OperatorError
from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats
from elastream.processes import forkserver, live_runs
from elastream.processes.control import PendingReplies, target_process
from elastream.processes.fused_members import RunChains, listed_operators, part_flows
from elastream.processes.held_start import HeldWorkers, workers_can_wait
from elastream.processes.spawn import create_rings, remove_rings, spawn_workers, warm_fork_server
from elastream.processes.local import LocalPart
from elastream.processes.main_guard import check_main_guard, reimports_main
from elastream.processes.merge_stats import credit_moved_unit, merge_stats
from elastream.processes.part_reports import listing_every_operator, remote_error
from elastream.processes.messages import (Control, ControlResult, Done, Failed, Final, PartMessage, RingsReady,
                                          Shutdown, Started, Stats, receive, send)
from elastream.processes.replica_choice import ActiveReplicas
from elastream.processes.replicate import expand_assignment
from elastream.processes.spec import ChildSpec, cross_edges, is_proxy, split_flow
from elastream.processes.worker_death import WorkerProcessError, death_of
from elastream.processes.child_record import ChildRecord as _Child, any_unended
from elastream.runtime.config import RunConfig
from elastream.runtime.decisions import Applied, Decision, Fuse, SetReplicas, SetThreads, Unfuse
from elastream.runtime.handle import RunResult, wait_slice
from elastream.runtime.periodic import PeriodListener, PeriodSampler

#: Longest sleep of the supervisor thread and of a waiting caller between looks (Ctrl-C interrupts the
#: caller's wait at once; a run that ends wakes both at once).
WATCH_S = 0.5
#: How long a dead worker's exit status is waited for (it is normally there at once).
EXIT_STATUS_WAIT_S = 1.0
class ProcessRunHandle:
    """A flow running on several worker processes (a :class:`~elastream.runtime.handle.RunHandle`).

    ``flow`` must already be validated (``Runner.start`` does it before placing).
    """

    def __init__(self, flow: Flow, config: RunConfig, assignment: dict[str, int]):
        if config.processes > 1 and reimports_main(config.process.start_method):
            check_main_guard()  # before anything starts: every worker would re-run an unguarded main script
        self.flow = flow
        self.config = config
        self.timeline: list[Applied] = []
        #: One merged statistics snapshot per period (the parts' latest reports) for every listener.
        self.periods = PeriodSampler(self.stats)
        self._period_s = config.scheduling.stats_period_ms / 1000.0
        self._next_period: float | None = None
        """Every decision submitted to this run, as the part that hosts it applied it (in order)."""
        # Replicated operators (``replicas=``, C-Stream §4.2) become split → replicas → merge.
        placement = config.placement
        self.run_flow, self.assignment = expand_assignment(
            flow, assignment, config.processes, config.replicas,
            stats=placement if isinstance(placement, FlowStats) else None,
            window_s=config.ordering.replica_window_s, active=config.active_replicas)
        self.processes = config.processes
        self._replicas = ActiveReplicas(self.assignment)  # which replicas a lower count keeps (not held ready)
        self._started = perf_counter()
        self._rings: list[Any] = []
        self._done = threading.Event()
        self._shutdown_sent = False
        self._stop_requested_at: float | None = None
        self._explicit_shutdown = False
        self._failure: BaseException | None = None
        self._result: RunResult | None = None
        self._children: list[_Child] = []
        self._held: HeldWorkers | None = None
        """Held-ready workers the supervisor thread has still to start (processes.held_start)."""
        self._local: LocalPart | None = None
        self._replies = PendingReplies()
        operators = {name: handle.operator for name, handle in self.run_flow.operators.items()}
        #: Every name stats() lists, with its operator: a replicated fused chain's members too.
        self._listed = listed_operators(operators, self.assignment, config.bypass)
        self._unreported: dict[str, Any] = {}  # zero statistics of each operator not reported yet (constant)
        self._handlers = {Started: self._on_started, Stats: self._on_stats, ControlResult: self._on_control_result,
                          Done: self._on_final, Failed: self._on_final}
        self._start()
        live_runs.track(self)  # an interpreter exit shuts it down first (its part 0 runs on daemon threads)
        self._thread = threading.Thread(target=self._supervise, name="elastream-supervisor", daemon=True)
        self._thread.start()

    # -- start ---------------------------------------------------------------------------
    def _start(self) -> None:
        from elastream.ipc.ring import SharedRing

        ring_names = {edge: SharedRing.new_name() for edge, *_ in cross_edges(self.run_flow, self.assignment)}
        try:
            specs = split_flow(self.run_flow, self.assignment, self.processes, ring_names, self.config.for_part())
            self._specs = specs
            self._proxy_targets = {ce.sender_name: ce.conn.dst for spec in specs for ce in spec.outgoing}
            if workers_can_wait(self.assignment, self.config.active_replicas):
                # Held-ready workers (an elastic Runner()) take no work until a decision adds them: part 0
                # starts at once, and the supervisor thread starts them later (processes.held_start). Their
                # rings get pages then too, and part 0 maps them only as it uses them (most runs never do).
                self._create_rings(ring_names, reserve=False)
                self._held = HeldWorkers(specs[1:], self._rings)
                specs[0].held_rings = self._held.ring_names
                self._local = LocalPart(specs[0])
                self._local.when_completed(self._held.feeding(specs[0]), self._held.poke)
                return
            # The workers boot (~10 ms) while this thread creates the rings and starts part 0; each
            # waits for RingsReady before it attaches any.
            self._children = self._spawn(specs[1:])
            self._create_rings(ring_names)
            for c in self._children:
                c.send(RingsReady())  # one that has ended already (no operators) is reaped as usual
            self._local = LocalPart(specs[0])
        except BaseException:
            self._end_children(kill=True)
            self.unlink_rings()
            raise

    def _create_rings(self, ring_names: dict, reserve: bool = True) -> None:
        self._rings.extend(create_rings(ring_names.values(), self.config.process.ring_bytes, reserve=reserve))

    def _start_held(self, live: dict, sentinels: dict) -> None:
        """Start the held workers when due, or end their streams when the flow ended without them
        (supervisor thread; a failure to start fails the run)."""
        held = self._held
        if held is None or not held.waiting:
            return
        held.clear_wakes()
        if self._shutdown_sent:
            held.drop()  # part 0's receivers end with its shutdown
        elif not held.due():
            held.end_if_idle()
            return
        try:
            children = self._spawn(held.take())
        except BaseException as error:  # noqa: BLE001 - reported as the run's failure
            self._fail(error)
            return
        for c in children:
            c.send(RingsReady())
            live[c.conn], sentinels[c.process.sentinel] = c, c
        self._children = children

    def _spawn(self, specs: list[ChildSpec]) -> list[_Child]:
        children: list[_Child] = []
        try:
            spawn_workers(specs, self.config.process, self, children)
        except BaseException:
            self._children = children  # the ones started are ended by the caller's clean-up
            raise
        return children

    def _end_children(self, kill: bool = False) -> None:
        """Join every worker (killing them first after a failed start) and close their pipes."""
        for c in self._children:
            if kill:
                c.process.kill()
            c.join(0.5 if c.final is not None else 0.0)
            c.conn.close()
        forkserver.release_fork_server(self)

    # -- supervisor thread -------------------------------------------------------------------
    def _supervise(self) -> None:
        try:
            self._watch()
        finally:
            if self._held is not None:
                self._held.close()
            self._reap()
            self.unlink_rings()
            self._replies.abandon(None, "the run has ended")
            self._done.set()
            live_runs.forget(self)

    def _watch(self) -> None:
        if self._held is not None:
            warm_fork_server(self._held.specs, self.config.process)
        live = {c.conn: c for c in self._children}
        sentinels = {c.process.sentinel: c for c in self._children}
        grace = self.config.scheduling.shutdown_grace_s + 2.0
        local = self._local
        # Every sentinel is waited for, not only the pipes: a worker whose pipe closed without its end
        # reported has died, and that must fail the run, never end it normally without its outputs.
        while live or any_unended(sentinels.values()) or (local is not None and local.final is None):
            local_running = local is not None and local.final is None
            waitables = list(live) + list(sentinels) + ([local.ready_fd] if local_running else [])
            waitables += [self._held.fd] if self._held is not None and self._held.waiting else []
            # Children and the local part wake this thread when they have news; the timeout only bounds how
            # late the grace period after a stop request is checked (every wake-up takes the GIL from part 0).
            for ready in wait_ready(waitables, timeout=self._watch_timeout()):
                child = live.get(ready)
                if child is not None:
                    self._drain(child, live)
                elif ready in sentinels:
                    self._on_exit(sentinels.pop(ready), live)
            self._start_held(live, sentinels)
            self._tick_period()
            if local_running and local.done:
                failure = local.collect(timeout=grace)
                if failure is not None:
                    self._fail(failure)
            if self._rings and self._all_final():
                self.unlink_rings()  # nobody attaches any more: unlink while the workers exit (~1 ms a ring)
            asked = self._stop_requested_at
            if asked is not None and perf_counter() - asked > grace:
                break  # the survivors did not stop in time: _reap kills them

    def add_period_listener(self, listener: PeriodListener) -> None:
        """Call ``listener(PeriodStats)`` once per statistics period (on the supervisor thread), over every
        part's statistics merged (each worker process reports its own a few times a second)."""
        self.periods.add_listener(listener)
        if self._next_period is None:
            self._next_period = perf_counter() + self._period_s

    def _watch_timeout(self) -> float:
        timeout = WATCH_S if self._stop_requested_at is None else 0.1
        if self._next_period is not None:
            timeout = min(timeout, max(0.0, self._next_period - perf_counter()))
        held = self._held.timeout() if self._held is not None else None
        return timeout if held is None else min(timeout, held)

    def _tick_period(self) -> None:
        """The period's one snapshot, when one is due and somebody listens."""
        if self._next_period is not None and perf_counter() >= self._next_period:
            self._next_period += self._period_s
            self.periods.tick()

    def _all_final(self) -> bool:
        """True once every part has reported its end (done or failed)."""
        local = self._local
        return (local is None or local.final is not None) and all(c.final is not None for c in self._children)

    def _drain(self, child: _Child, live: dict) -> None:
        try:
            while child.conn.poll():
                message: PartMessage = receive(child.conn)
                self._handlers[type(message)](child, message)
        except (EOFError, OSError):
            live.pop(child.conn, None)

    def _on_exit(self, child: _Child, live: dict) -> None:
        """``child``'s process has ended: read what it sent last; if that was not its end, it died."""
        self._drain(child, live)
        live.pop(child.conn, None)
        if child.final is None:
            self._replies.abandon(child.index, f"process {child.index} died")
            # Its pipes close while the kernel tears it down, a moment before it can be reaped: wait for
            # that moment so that the error can say how it died.
            child.process.join(EXIT_STATUS_WAIT_S)
            self._fail(death_of(child.index, child.pid, child.process, child.operators))

    def _on_started(self, child: _Child, message: Started) -> None:
        child.pid = message.pid

    def _on_stats(self, child: _Child, message: Stats) -> None:
        child.stats = message.stats

    def _on_control_result(self, child: _Child, message: ControlResult) -> None:
        self._replies.answer(message)

    def _on_final(self, child: _Child, message: Final) -> None:
        child.final = message
        if message.stats is not None:
            child.stats = message.stats
        self._replies.abandon(child.index, f"process {child.index} has ended")
        if isinstance(message, Failed):
            self._fail(remote_error(message))

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._broadcast_shutdown()

    def _broadcast_shutdown(self) -> None:
        if self._shutdown_sent:
            return
        self._shutdown_sent = True
        self._stop_requested_at = perf_counter()
        if self._local is not None:
            self._local.request_shutdown()
        for c in self._children:
            if c.final is None:
                c.send(Shutdown())

    def _reap(self) -> None:
        local = self._local
        if local is not None and local.final is None:
            local.request_shutdown()  # only after the grace period: its threads get one more chance to end
            local.collect(timeout=self.config.scheduling.shutdown_grace_s + 2.0)
        if local is not None:
            local.close()
        self._end_children()
        self._fail_on_lost_parts()

    def _fail_on_lost_parts(self) -> None:
        """A worker that ended without reporting its end fails the run (unless a stop was asked for): its sentinel
        normally says so first (:meth:`_on_exit`); this last check keeps a run from ending without a part's outputs."""
        lost = [c for c in self._children if c.final is None]
        if lost and self._failure is None and not self._explicit_shutdown:
            c = lost[0]
            self._failure = death_of(c.index, c.pid, c.process, c.operators)

    def unlink_rings(self) -> None:
        """Remove the run's ring segments (once: the supervisor and an exit hook may both call it)."""
        rings, self._rings = self._rings, []
        remove_rings(rings)

    # -- control -----------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Ask every worker process to stop, without waiting."""
        self._explicit_shutdown = True
        self._broadcast_shutdown()

    def shutdown(self, timeout: float = 5.0) -> RunResult:
        """Ask every worker process to stop and wait for them."""
        self.request_shutdown()
        return self.wait(timeout)

    @property
    def finished(self) -> threading.Event:
        """Set once every worker process has ended and been joined."""
        return self._done

    def submit(self, decisions: Sequence[Decision]) -> list[Applied]:
        """Carry ``decisions`` to the parts that host them, wait for their answers, record them in ``timeline``.

        ``SetThreads`` goes to the process it names (0: this one); ``SetReplicas`` and ``MoveKeyGroups`` to
        the process of the operator's split; ``Fuse`` / ``Unfuse`` to the process that runs the chain. Every
        decision is sent before any answer is awaited; a worker answers from its control loop within
        milliseconds (or the decision is recorded as unanswered after :data:`~.control.REPLY_TIMEOUT_S`).

        Example: ``handle.submit([SetThreads(2, process=1)])[0].ok`` is True once process 1 runs 2 threads.
        """
        at = perf_counter() - self._started
        decisions = decisions if self.config.active_replicas is not None else self._replicas.choose_each(decisions)
        pending = [self._dispatch(d) for d in decisions]
        applied = []
        for decision, sent in zip(decisions, pending):
            result = sent if isinstance(sent, ControlResult) else self._replies.wait(sent)
            if result.ok and isinstance(decision, (Fuse, Unfuse)):
                self._chains.regrouped(target_process(decision, self.assignment), decision)
            elif isinstance(decision, SetReplicas):
                self._replicas.settle(decision, result.ok)
                credit_moved_unit(self._proxy_targets, self.run_flow, decision, result)
            applied.append(Applied(decision, at, result.ok, result.why, result.pause_ms))
        self.timeline.extend(applied)
        return applied

    def _dispatch(self, decision: Decision) -> ControlResult | int:
        """Apply ``decision`` in part 0, or send it to its worker: its answer, or the ticket to wait for."""
        process = target_process(decision, self.assignment)
        if isinstance(process, str):
            return ControlResult(0, False, process)
        if not 0 <= process < self.processes:
            return ControlResult(0, False, f"no process {process} in a run of {self.processes}")
        if process == 0:
            if isinstance(decision, SetReplicas) and self._held is not None and \
                    (decision.count > 1 or decision.replicas not in (None, (0,))):
                self._held.ask()  # its replicas' workers start now; what it sends them waits in their rings
            return self._local.control(decision) if self._local is not None else ControlResult(0, False, "no part 0")
        if process > len(self._children):
            return ControlResult(0, False, f"process {process} is still starting")
        child = self._children[process - 1]
        if child.final is not None or self._done.is_set():
            return ControlResult(0, False, f"process {process} has ended")
        ticket = self._replies.expect(process)
        if not child.send(Control(decision, ticket)) or child.final is not None:
            # Its end may have been recorded before the ticket existed: nobody else would answer it.
            self._replies.abandon(process, f"process {process} has ended")
        return ticket

    def set_threads(self, n: int) -> int:
        """Set the worker-thread count of every process (through :meth:`submit`); returns ``n``."""
        if n < 1:
            raise ValueError("a flow needs at least one worker thread")
        self.submit([SetThreads(n, process=i, reason="set_threads") for i in range(self.processes)])
        return n

    @property
    def worker_pids(self) -> list[int | None]:
        """Process id of each worker process, by process index (index 0 is this process)."""
        local = [self._local.pid] if self._local is not None else []
        return local + [c.process.pid for c in self._children]

    @property
    def fused(self) -> tuple[tuple[str, ...], ...]:
        """The chains running as one task each (member names in flow order): those fused into one operator before
        the run (``elastic.units``; replicated as ``"a+b+c#0"``…), then each part's as it runs them now."""
        local = self._local.handle if self._local is not None else None
        return tuple(dict.fromkeys(self._chains.all() + tuple(local.fused if local is not None else ())))

    @cached_property
    def _chains(self) -> RunChains:
        return RunChains((h.operator for h in self.run_flow.operators.values()), self._specs)

    def part_flows(self) -> list[Flow]:
        """The flow each part runs, by process index (its operators and the proxies at its cut edges)."""
        return part_flows(self._specs)

    @property
    def threads(self) -> int:
        """Worker threads per process, as the run was started."""
        return self.config.threads

    @property
    def done(self) -> bool:
        """True once every worker process has ended."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run ends; raise the first failure (an OperatorError carries the partial result)."""
        deadline = None if timeout is None else perf_counter() + timeout
        try:
            while not self._done.wait(wait_slice(deadline, WATCH_S)):
                if deadline is not None and perf_counter() >= deadline:
                    raise TimeoutError(f"flow {self.flow.name!r} still running after {timeout} s")
        except KeyboardInterrupt:
            self._explicit_shutdown = True
            self._broadcast_shutdown()
            self._done.wait(self.config.scheduling.shutdown_grace_s + 5.0)
            raise
        return self._finish()

    def _finish(self) -> RunResult:
        if self._result is None:
            outputs: dict[str, Any] = {}
            for final in self._finals():
                if final is not None:
                    outputs.update({k: v for k, v in final.outputs.items() if not is_proxy(k)})
            self._result = RunResult(outputs=outputs, stats=self.stats(), elapsed_s=perf_counter() - self._started,
                                     shutdown=self._explicit_shutdown)
        if self._failure is not None:
            if isinstance(self._failure, OperatorError):
                self._failure.partial = self._result  # what every part had produced, as the threads backend
            raise self._failure.with_traceback(None)  # the parts' frames: the report holds the operator's traceback
        return self._result

    # -- observation ---------------------------------------------------------------------------
    def stats(self) -> FlowStats:
        """Merged statistics of every worker process (proxies left out), listing every operator.

        A fused chain replicated across processes is listed as its replicas (``"a+b+c#0"``…,
        which controllers size by the unit's name) and as its members ``a``, ``b``, ``c``,
        each summed over the replicas. An operator whose worker has not reported yet (each
        reports a few times a second) is listed with zero counts in state ``ready``.
        """
        merged = merge_stats(self.part_stats(), perf_counter() - self._started,
                             self.config.threads * self.processes, self._listed, self._proxy_targets)
        return listing_every_operator(merged, self._listed, self._unreported)

    def part_stats(self) -> list[FlowStats | None]:
        """The latest statistics of each part, by process index (None: not reported yet)."""
        local = [self._local.stats()] if self._local is not None else []
        return local + [c.stats for c in self._children]

    def _finals(self) -> list[Final | None]:
        local = [self._local.final] if self._local is not None else []
        return local + [c.final for c in self._children]

    def states(self) -> dict[str, str]:
        """Operator name → last reported state."""
        return {name: op.state for name, op in self.stats().operators.items()}
