"""When a ring consumer should poll: adaptive hybrid polling around the expected arrival of the next record.

Role: the policy half of the consumer's waiting (the mechanism is
:meth:`elastream.ipc.ring.SharedRing._wait_data`). A consumer that sleeps on
its wake pipe pays, per record, a wake-up syscall on the producer's side and
an idle-CPU wake-up on its own; on a VM the latter alone costs tens of
microseconds, and code that has not run for a few milliseconds runs 5-15x
slower at first. A consumer that polls pays neither but burns a core. Steady
streams (a sensor, a market feed, a paced source) arrive at regular gaps, so
the consumer can do both, as Linux's hybrid block-device polling does: sleep
until just before the next record is expected, then poll a short window
around that time, then fall back to sleeping. The window is sized from the
observed jitter of the gaps and of the consumer's own timed sleeps, and
polling is used only while the window stays below ``duty`` of the gap, so
polling never takes more than that fraction of a core; irregular streams
(Poisson, bursts, pauses) make the window wide and the predictor steps aside.

Threading model: one predictor per consumer handle, used under the consumer's
lock. Deterministic: every method takes the current time as an argument.
"""

from __future__ import annotations

__all__ = ["ArrivalPredictor"]

_ALPHA = 0.125            # EWMA weight of a new sample (like TCP's SRTT)
_PAUSE_FACTOR = 4.0       # a gap this many times the average is a pause, not a sample
_CLIP = 3.0               # a gap error counts for at most this many times the current jitter


class ArrivalPredictor:
    """Predicts the next record's arrival from the past ones and plans a polling window around it.

    ``duty``: the largest fraction of the gap spent polling (0 disables
    polling); ``min_lead``: the least time to poll before the expected arrival.

    Example::

        p = ArrivalPredictor(duty=0.1)
        for t in (0.00, 0.01, 0.02, 0.03):
            p.arrived(t)
        start, stop = p.plan(now=0.031)           # around 0.04
        assert start < 0.04 < stop and stop - start <= 0.1 * 0.01
    """

    __slots__ = ("duty", "min_lead", "last", "gap", "dev", "lateness", "polls", "hits", "_pauses")

    def __init__(self, duty: float = 0.1, min_lead: float = 60e-6):
        self.duty = duty
        self.min_lead = min_lead
        self.last: float | None = None     # time the last record was seen
        self.gap: float | None = None      # smoothed gap between records
        self.dev = 0.0                     # smoothed |gap - expected gap| (the jitter)
        self.lateness = 100e-6             # smoothed overshoot of the consumer's timed sleeps
        self.polls = 0                     # polling windows opened
        self.hits = 0                      # ... that saw the record arrive
        self._pauses = 0                   # long gaps in a row (three make a new rate)

    def arrived(self, now: float) -> None:
        """A consumer that had to wait received a record at ``now`` (one call per wait)."""
        last, self.last = self.last, now
        if last is None:
            return
        sample = now - last
        if self.gap is None or self._pauses >= 2:
            self.gap, self.dev, self._pauses = sample, 0.0, 0
        elif sample > _PAUSE_FACTOR * self.gap:
            self._pauses += 1
        else:
            self._pauses = 0
            # Gaps on a VM are heavy-tailed (a stalled vCPU shifts one arrival by a millisecond): clipping an
            # outlier's weight keeps one hiccup from widening the window for the next dozen records.
            error = min(abs(sample - self.gap), max(_CLIP * self.dev, self.min_lead))
            self.dev += _ALPHA * (error - self.dev)
            self.gap += _ALPHA * (sample - self.gap)

    def lead(self) -> float:
        """How long before (and after) the expected arrival to poll."""
        return self.min_lead + 2.5 * self.dev

    def plan(self, now: float) -> tuple[float, float] | None:
        """``(start, stop)`` of the next polling window, or None: just sleep (no history, irregular, or past)."""
        if self.duty <= 0 or self.gap is None or self.last is None:
            return None
        lead = self.lead()
        if 2.0 * lead > self.duty * self.gap:
            return None
        expected = self.last + self.gap
        if expected + lead <= now:
            return None
        return expected - lead, expected + lead

    def sleep_until(self, start: float) -> float:
        """When to end a timed sleep so that, late as sleeps are, the consumer is up by ``start``."""
        return start - self.lateness

    def woke(self, planned: float, now: float) -> None:
        """A timed sleep meant to end at ``planned`` ended at ``now`` (records the overshoot)."""
        self.lateness += _ALPHA * (max(0.0, now - planned) - self.lateness)

    def polled(self, hit: bool) -> None:
        """A polling window ended, with the record seen (``hit``) or not."""
        self.polls += 1
        self.hits += hit
