"""One flow's statistics from the snapshots of its parts (one per process).

The parent of a multi-process run shows the run as one flow: the operators of
every part (ring proxies left out), every part's worker threads renumbered,
and traffic into a ring credited to the operator behind it. An operator that
several parts list (a member of a fused chain replicated across processes,
:mod:`~elastream.processes.fused_members`) is listed once, its instances summed.

Threading: pure functions of immutable snapshots; called from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from elastream.graph.flow import Flow
from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.ordered.replicate import merge_name
from elastream.processes.fused_members import add_operator_stats
from elastream.processes.messages import ControlResult
from elastream.processes.spec import is_proxy
from elastream.runtime.decisions import MOVED_WHOLE, SetReplicas


def merge_stats(parts: Sequence[FlowStats | None], elapsed_s: float, threads: int,
                order: Iterable[str], proxy_targets: Mapping[str, str]) -> FlowStats:
    """One FlowStats from the per-process ones (None: a part that has not reported yet).

    Traffic sent to a ring proxy is credited to the real operator behind the
    ring (``proxy_targets``: sender proxy name → destination operator).
    Operators come in ``order`` (names; others are left out); one listed by
    several parts is summed.

    Example: ``merge_stats([None, None], 0.0, 2, {}, {}).operators == {}``
    """
    operators: dict[str, OperatorStats] = {}
    workers = []
    policy = "?"
    for process, part in enumerate(parts):
        if part is None:
            continue
        policy = part.policy
        for name, op in part.operators.items():
            if not is_proxy(name):
                op = _credit_proxies(op, proxy_targets)
                known = operators.get(name)
                operators[name] = op if known is None else add_operator_stats(known, op)
        for w in part.workers:
            same = w.index == len(workers) and w.process == process
            workers.append(w if same else replace(w, index=len(workers), process=process))
    ordered = {name: operators[name] for name in order if name in operators}
    return FlowStats(elapsed_s=elapsed_s, threads=threads, policy=policy, operators=ordered,
                     workers=tuple(workers))


def _credit_proxies(op: OperatorStats, proxy_targets: Mapping[str, str]) -> OperatorStats:
    """``op`` with what it sent to a ring proxy counted as sent to the operator behind the ring.

    ``op`` itself when it sent nothing to a proxy: a snapshot's copy (``dataclasses.replace``) costs
    about 40 µs, and the elastic loop merges every operator of every part twice a second while
    holding the GIL that part 0's worker needs.
    """
    if not any(dst in proxy_targets for dst in op.sent):
        return op
    sent = {proxy_targets.get(dst, dst): n for dst, n in op.sent.items()}
    return replace(op, sent=sent)


def credit_moved_unit(proxy_targets: dict[str, str], run_flow: Flow, decision: SetReplicas,
                      answer: ControlResult) -> None:
    """Once ``decision`` moved a unit whole into another process (``answer.why`` is ``MOVED_WHOLE``), credit
    what its replica there sends into the ring to the unit's consumer, which the ring's receiver now feeds,
    not to the unit's merge: else the unit shows no edge to its consumer, and DS2 sizes that consumer
    without the moved unit's tuples."""
    if not (answer.ok and answer.why == MOVED_WHOLE):
        return
    merge = merge_name(decision.operator)
    consumer = next((c.dst for c in run_flow.connections if c.src == merge), None)
    if consumer is None:
        return
    for sender, dst in list(proxy_targets.items()):
        if dst == merge:
            proxy_targets[sender] = consumer
