"""What happens when a scheduling policy raises: the run stops, naming the policy.

A policy's ``pick``, ``quantum`` or ``on_tick`` that raises is a failure of the
run like an operator's: the first one is recorded on the scheduler (which asks
every operator to stop), the workers keep dispatching so the flow drains and
ends, and the runner raises :class:`PolicyError` — an
:class:`~elastream.errors.OperatorError` whose message names the policy and the
hook, with the policy's traceback in ``details``.

So that the drain can proceed, a policy that failed is replaced by
:class:`AfterFailure`, which picks the first ready operator and keeps the
runner's quantum; a failed ``on_tick`` listener stops calling the policy.

Threading: :func:`after_failure` runs on a worker with the scheduler's lock
held (``pick``); :func:`report_quantum_failure` on a worker without it;
:func:`guarded_ticks`'s listener on the monitor thread. Each records through the
scheduler, whose first recorded failure wins.

Example::

    try:
        es.Runner(threads=2, policy="boom").run(flow)
    except es.OperatorError as error:   # a PolicyError here
        print(error)  # scheduling policy 'boom' failed in pick: ValueError: ...
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from elastream.errors import OperatorError
from elastream.runtime.traps import Failed

if TYPE_CHECKING:  # pragma: no cover
    from elastream.metrics.period import PeriodStats
    from elastream.policies.base import TaskView
    from elastream.runtime.scheduler import Scheduler

Record = Callable[[str, Failed], None]

#: Frames in these files called the policy (the scheduler, a worker, the tick listener below): not its code.
_CALLER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime") + os.sep
_THIS_FILE = os.path.abspath(__file__)


class PolicyError(OperatorError):
    """A scheduling policy raised while the flow ran; the flow was stopped.

    ``policy`` is the policy's registered name, ``hook`` the method that raised
    (``pick``, ``quantum`` or ``on_tick``); ``operator`` reads ``<policy NAME>``
    (no operator failed); ``cause``, ``details`` and ``partial`` are as for an
    :class:`~elastream.errors.OperatorError`.
    """

    def __init__(self, policy: str, hook: str, cause: BaseException, details: str, partial: Any = None):
        super().__init__(policy_place(policy), cause, details, partial)
        self.policy = policy
        self.hook = hook
        self.args = (f"scheduling policy {policy!r} failed in {hook}: {type(cause).__name__}: {cause}",)


@dataclass(frozen=True, slots=True)
class PolicyFailed(Failed):
    """A recorded failure of the policy ``policy`` in its method ``hook``."""

    policy: str = ""
    hook: str = ""


class AfterFailure:
    """Stands in for a policy that raised so the flow can drain: the first ready operator, the default quantum."""

    wants_ticks = False

    def __init__(self, failed: Any):
        self.name = policy_name(failed)

    def pick(self, ready: Collection[TaskView], now: float) -> TaskView:
        return next(iter(ready))

    def quantum(self, task: TaskView, default: float) -> float:
        return default

    def on_tick(self, stats: PeriodStats) -> None:
        return None


def policy_name(policy: Any) -> str:
    """The name a policy is registered under (its class name if it has none)."""
    return str(getattr(policy, "name", None) or type(policy).__name__)


def policy_place(policy: str) -> str:
    """What a policy failure names as its ``operator``: ``<policy NAME>``."""
    return f"<policy {policy}>"


def policy_failure(policy: Any, hook: str, error: BaseException) -> tuple[str, PolicyFailed]:
    """The (place, failure) a scheduler records for ``policy`` raising ``error`` in ``hook``."""
    name = policy_name(policy)
    return policy_place(name), PolicyFailed(error, policy_traceback(error), name, hook)


def policy_traceback(error: BaseException) -> str:
    """``error``'s traceback from the policy's method on (the engine's frames that called it cut off), formatted.

    Unlike an operator's (:func:`~elastream.errors.operator_traceback`), a built-in policy keeps
    all its frames: its own code, in the elastream package, is where it failed.
    """
    error.__traceback__ = _from_policy_code(error.__traceback__)
    return "".join(traceback.format_exception(error))


def _from_policy_code(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None and _is_caller_frame(tb):
        tb = tb.tb_next
    return tb


def _is_caller_frame(tb: TracebackType) -> bool:
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return path.startswith(_CALLER_DIR) or path == _THIS_FILE


def after_failure(policy: Any, hook: str, error: BaseException, record: Record) -> AfterFailure:
    """Record ``policy``'s failure through ``record`` (lock held) and return its stand-in."""
    record(*policy_failure(policy, hook, error))
    return AfterFailure(policy)


def report_quantum_failure(sched: Scheduler, error: BaseException) -> None:
    """A worker's call of ``sched.policy.quantum`` raised: stop the flow, naming the policy (lock not held)."""
    sched.internal_error(*policy_failure(sched.policy, "quantum", error), None)


def guarded_ticks(policy: Any, sched: Scheduler) -> Callable[[PeriodStats], None]:
    """``policy.on_tick`` as a period listener that stops the flow, naming the policy, the first time it raises."""
    failed = False

    def on_tick(stats: PeriodStats) -> None:
        nonlocal failed
        if failed:
            return
        try:
            policy.on_tick(stats)
        except Exception as exc:  # noqa: BLE001 - reported as the run's failure
            failed = True
            sched.internal_error(*policy_failure(policy, "on_tick", exc), None)

    return on_tick


def run_error(where: str, failed: Failed, partial: Any = None) -> OperatorError:
    """The error a run raises for its recorded failure: a :class:`PolicyError` for a policy's, else an operator's."""
    if isinstance(failed, PolicyFailed):
        return PolicyError(failed.policy, failed.hook, failed.error, failed.details, partial)
    return OperatorError(where, failed.error, failed.details, partial=partial)
