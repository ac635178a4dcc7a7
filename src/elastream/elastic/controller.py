"""The elasticity controller plug-in point: the :class:`Controller` protocol, the :class:`Machine` view, a registry.

A controller reads one period's statistics snapshot
(:class:`~elastream.metrics.period.PeriodStats`), the run's current
:class:`~elastream.runtime.decisions.Levels` and a small :class:`Machine` view,
and returns decisions, each with a human reason. It keeps its own state between
periods (the trend controller's thread records) but never touches runtime
objects (STYLE.md): the elastic loop applies what it returns.

Threading: a controller instance is used by one elastic loop, from that loop's
thread only; :class:`Machine` is an immutable value. The registry is filled at
import time and read afterwards.

Example::

    controller = create_controller("trend")
    decisions = controller.decide(period, Levels(threads=(2,)), Machine(cores=2, cpu_percent=55.0))
    [d.reason for d in decisions]
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from elastream.metrics.period import PeriodStats
from elastream.runtime.decisions import Decision, Levels, SetThreads

#: IBM §4.2.3: no thread increase while the machine's CPU is busier than this (percent of all cores),
#: so that several greedy runs on one host do not oversubscribe it.
CPU_BUSY_PERCENT = 80.0

#: Threads per core allowed for operators that release the GIL while they wait (blocking I/O), when
#: the caller gives no ``max_threads``: waiting threads cost little, but each still costs a stack and
#: a share of the scheduler's attention.
WAITING_THREADS_PER_CORE = 4


def available_cores() -> int:
    """CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Machine:
    """What a controller knows of the machine over the last period (measured by the caller).

    ``cpu_percent`` is the whole machine's CPU use over the period (0–100, every core;
    psutil's ``cpu_percent``), ``max_threads`` the most worker threads per process for
    operators that release the GIL while they wait, ``max_processes`` the most worker
    processes (None: the cores).
    """

    cores: int = 1
    cpu_percent: float = 0.0
    max_threads: int | None = None
    max_processes: int | None = None

    @classmethod
    def here(cls) -> Machine:
        """This machine with nothing measured (no CPU load known): what a controller assumes without a view."""
        return cls(cores=available_cores())

    @property
    def thread_cap(self) -> int:
        """The most threads per process for GIL-releasing operators."""
        return max(self.cores, self.max_threads or WAITING_THREADS_PER_CORE * self.cores)

    @property
    def process_cap(self) -> int:
        """The most worker processes."""
        return max(1, self.max_processes or self.cores)

    def is_cpu_measured(self) -> bool:
        """True when the caller measured the machine's CPU (a running flow never reads exactly 0%)."""
        return self.cpu_percent > 0.0

    def is_cpu_busy(self) -> bool:
        """True when the machine's CPU is too busy for more threads (IBM §4.2.3, above 80%)."""
        return self.cpu_percent > CPU_BUSY_PERCENT


@runtime_checkable
class Controller(Protocol):
    """An elasticity controller: decisions from one period's statistics."""

    name: str

    def decide(self, period: PeriodStats, levels: Levels, machine: Machine | None) -> list[Decision]:
        """The decisions for the next period (empty: keep the levels); each carries its reason.

        ``levels`` are the levels in force during ``period``; ``machine`` None means
        nothing was measured (:meth:`Machine.here` is assumed).
        """


ControllerFactory = Callable[..., Controller]

#: Controller name → factory (keyword options → a fresh controller with its own state).
CONTROLLERS: dict[str, ControllerFactory] = {}


def register_controller(name: str, factory: ControllerFactory) -> None:
    """Make ``create_controller(name)`` build controllers with ``factory``.

    Example: ``register_controller("mine", MyController)``
    """
    if not name:
        raise ValueError("a controller needs a name")
    CONTROLLERS[name] = factory


def create_controller(name: str, **options: Any) -> Controller:
    """A fresh controller named ``name`` ("trend", "utilization", "ds2", "auto" or a registered one).

    Example: ``create_controller("utilization", low=0.5).name == "utilization"``
    """
    _register_builtins()
    try:
        factory = CONTROLLERS[name]
    except KeyError:
        raise ValueError(f"unknown elasticity controller {name!r}; choose one of "
                         f"{', '.join(sorted(CONTROLLERS))}") from None
    return factory(**options)


def machine_or_here(machine: Machine | None) -> Machine:
    """``machine``, or this machine with no load measured when the caller gave none."""
    return machine if machine is not None else Machine.here()


def threads_everywhere(levels: Levels, threads: int, reason: str) -> list[Decision]:
    """SetThreads(threads) for every process not already running that many.

    The thread controllers size every process alike: the throughput they follow is the whole flow's.

    Example: ``threads_everywhere(Levels(threads=(2, 1)), 2, "why")`` → ``[SetThreads(2, process=1, reason="why")]``
    """
    return [SetThreads(threads, process=p, reason=reason) for p, now in enumerate(levels.threads) if now != threads]


def _register_builtins() -> None:
    """Register the built-in controllers (imported here: their modules import this one)."""
    if "trend" in CONTROLLERS:
        return
    from elastream.elastic.ds2 import DS2Controller
    from elastream.elastic.combined import CombinedController
    from elastream.elastic.trend import TrendController
    from elastream.elastic.utilization import UtilizationController

    CONTROLLERS.setdefault("utilization", UtilizationController)
    CONTROLLERS.setdefault("ds2", DS2Controller)
    CONTROLLERS.setdefault("auto", CombinedController)
    CONTROLLERS["trend"] = TrendController
