"""Bottleneck detection by write-blocked ratio (C-Stream §4.2.1, Algorithm 9).

An operator is a bottleneck when its input is congested — its producers wait
on its full input port — while its output is not: it is not merely held back
by back-pressure from further down, it is too slow for what it is given. Only
operators that could be replicated are candidates (one input, one output,
stateless or partitioned; a fused chain of them counts as one).

Ports fill only where producer and consumer run at once. A source sharing
one thread with the slow operator is not blocked on a full port: it waits
for the thread (it starves, :attr:`~elastream.elastic.view.Unit.starved_s`).
When a source starved for τ of the period and Algorithm 9 finds nothing,
the replicable unit that took most of the threads' time is the bottleneck.

A replicated operator's input congestion is how long its split waited on its
replicas (Algorithm 9 averages the replicas' input ports; the split waits
whenever one of them is full), its output congestion how long the replicas or
their merge waited downstream.

Threading: pure functions over immutable views.

Example::

    [unit.name for unit in detect_bottlenecks(flow_view(period))]   # e.g. ["slow"]
"""

from __future__ import annotations

from elastream.elastic.view import FlowView, Unit

#: Congestion threshold τ: a port is congested when full for at least this fraction of the period.
#: C-Stream uses 0.01 over whole-run ratios and 10 s periods; here ratios are per period of about
#: half a second, where one long batch write already holds a port full for a few percent of it,
#: so a tenth of the period is the smallest congestion that is not such a blip.
TAU = 0.1


#: A unit whose input holds more than this many seconds of its work (at its true rate and instances)
#: is as congested as one whose producers wait: a finite input that fits in the unit's input buffers
#: never blocks its source, and Algorithm 9 alone would never see the unit fall behind.
DRAIN_S = 1.0


def is_bottleneck(unit: Unit, tau: float = TAU) -> bool:
    """Algorithm 9's test for one candidate: input congested (≥ τ) — or backlogged — and output not (< τ).

    Example: ``is_bottleneck(unit)`` for a unit whose producers waited 60% of the period and which never waited.
    """
    congested = unit.input_congestion >= tau or is_backlogged(unit)
    return unit.is_parallel and congested and unit.output_congestion < tau


def is_backlogged(unit: Unit, drain_s: float = DRAIN_S) -> bool:
    """True when the tuples waiting at ``unit``'s input would take it more than ``drain_s`` to handle.

    Example: a unit handling 500 tuples per busy second with 1,500 waiting is backlogged (3 s of work).
    """
    capacity = unit.true_rate * max(1, unit.instances) * drain_s
    return unit.true_rate > 0 and unit.backlog > capacity


def detect_bottlenecks(view: FlowView, tau: float = TAU) -> list[Unit]:
    """Every bottleneck unit of the period, from the sources downwards.

    Example: ``detect_bottlenecks(flow_view(period), tau=0.1)``
    """
    found = [unit for unit in view.topological() if is_bottleneck(unit, tau)]
    if found:
        return found
    busiest = cpu_bottleneck(view, tau)
    return [busiest] if busiest is not None else []


def is_starved(unit: Unit, period_s: float, tau: float = TAU) -> bool:
    """True for a source that waited for a worker thread τ of the period or more."""
    return unit.is_source and period_s > 0 and unit.starved_s >= tau * period_s


def cpu_bottleneck(view: FlowView, tau: float = TAU) -> Unit | None:
    """With a starved source: the replicable unit whose instance was busy longest (half the period at
    least) and whose output is not congested; else None.

    Example: src → slow (busy 95% of the period) → sink on one thread, src starved: ``slow``.
    """
    if not any(is_starved(s, view.period_s, tau) for s in view.sources()):
        return None
    candidates = [u for u in view.units.values() if u.is_parallel and u.output_congestion < tau]
    busiest = max(candidates, key=_busy_per_instance, default=None)
    if busiest is None or _busy_per_instance(busiest) < 0.5 * view.period_s:
        return None
    return busiest


def _busy_per_instance(unit: Unit) -> float:
    return unit.busy_s / max(1, unit.instances)


def detect_bottleneck(view: FlowView, tau: float = TAU) -> Unit | None:
    """Algorithm 9 as the paper states it: the first bottleneck among the candidates, or None.

    Example: ``detect_bottleneck(flow_view(period)) is None`` when nothing is congested.
    """
    found = detect_bottlenecks(view, tau)
    return found[0] if found else None
