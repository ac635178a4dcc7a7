"""One flow's statistics from the snapshots of its parts (one per process).

The parent of a multi-process run shows the run as one flow: the operators of
every part (ring proxies left out), every part's worker threads renumbered,
and traffic into a ring credited to the operator behind it.

Threading: pure functions of immutable snapshots; called from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from elastream.metrics.stats import FlowStats, OperatorStats
from elastream.processes.spec import is_proxy


def merge_stats(parts: Sequence[FlowStats | None], elapsed_s: float, threads: int,
                assignment: Mapping[str, int], proxy_targets: Mapping[str, str]) -> FlowStats:
    """One FlowStats from the per-process ones (None: a part that has not reported yet).

    Traffic sent to a ring proxy is credited to the real operator behind the
    ring (``proxy_targets``: sender proxy name → destination operator).
    Operators come in ``assignment``'s order.

    Example: ``merge_stats([None, None], 0.0, 2, {}, {}).operators == {}``
    """
    operators: dict[str, OperatorStats] = {}
    workers = []
    policy = "?"
    for part in parts:
        if part is None:
            continue
        policy = part.policy
        for name, op in part.operators.items():
            if not is_proxy(name):
                operators[name] = _credit_proxies(op, proxy_targets)
        for w in part.workers:
            workers.append(replace(w, index=len(workers)))
    ordered = {name: operators[name] for name in assignment if name in operators}
    return FlowStats(elapsed_s=elapsed_s, threads=threads, policy=policy, operators=ordered,
                     workers=tuple(workers))


def _credit_proxies(op: OperatorStats, proxy_targets: Mapping[str, str]) -> OperatorStats:
    """``op`` with what it sent to a ring proxy counted as sent to the operator behind the ring."""
    sent = {proxy_targets.get(dst, dst): n for dst, n in op.sent.items()}
    return replace(op, sent=sent)
