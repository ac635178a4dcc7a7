"""The runtime's clock, injectable so that tests can drive time by hand.

The scheduler (timers, sleeps, dispatch deadlines, the periodic call), the
operator :class:`~elastream.runtime.context.Context` (``ctx.now``,
``ctx.sleep``, preemption checks) and the :class:`~elastream.runtime.monitor.Monitor`
read time through a :class:`Clock`. Each of them binds ``clock.now`` once, when
it is built, so the hot path pays one plain function call, as it did when it
called ``time.perf_counter`` directly. The default, :data:`REAL_CLOCK`, *is*
``time.perf_counter`` (its ``now`` attribute is that very function).

:class:`ManualClock` is for deterministic tests: time stands still until the
test calls :meth:`ManualClock.advance` (trio's ``MockClock`` without the
auto-jump; :class:`~elastream.runtime.harness.SchedulerHarness` jumps to the
next timer itself). It does not wake threads blocked in a real wait, so it is
meant for the one-step harness, or for components driven by the test thread.

Threading: ``now()`` may be called from any thread. ``ManualClock.advance``
is called by the test thread; a float store is atomic under the GIL.

Example::

    >>> clock = ManualClock(start=10.0)
    >>> clock.now()
    10.0
    >>> clock.advance(0.25)
    10.25
    >>> REAL_CLOCK.now() <= REAL_CLOCK.now()
    True
"""

from __future__ import annotations

from time import perf_counter
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "PerfCounterClock", "REAL_CLOCK", "resolve"]


@runtime_checkable
class Clock(Protocol):
    """A monotonic source of time in seconds (the origin is arbitrary)."""

    def now(self) -> float:
        """The current time in seconds; never decreases."""
        ...


class PerfCounterClock:
    """The real clock: ``now`` is ``time.perf_counter`` itself (no wrapper call on the hot path)."""

    __slots__ = ()
    now = staticmethod(perf_counter)

    def __repr__(self) -> str:
        return "<PerfCounterClock>"


#: The clock every runtime component uses unless given another one.
REAL_CLOCK: Clock = PerfCounterClock()


class ManualClock:
    """A clock that moves only when told to: ``advance(dt)`` or ``set(t)``.

    Example::

        >>> c = ManualClock()
        >>> c.advance(1.5), c.now()
        (1.5, 1.5)
    """

    __slots__ = ("_t",)

    def __init__(self, start: float = 0.0):
        self._t = float(start)

    def now(self) -> float:
        """The time the test last set."""
        return self._t

    def advance(self, dt: float) -> float:
        """Move time forward by ``dt`` seconds (>= 0); return the new time."""
        if dt < 0:
            raise ValueError(f"a monotonic clock cannot go back (advance({dt}))")
        self._t += dt
        return self._t

    def set(self, t: float) -> float:
        """Move time forward to ``t`` (no-op if ``t`` is not later); return the new time."""
        if t > self._t:
            self._t = float(t)
        return self._t

    def __repr__(self) -> str:
        return f"<ManualClock t={self._t!r}>"


def resolve(clock: Clock | None) -> Clock:
    """``clock``, or the real clock for None."""
    return REAL_CLOCK if clock is None else clock
