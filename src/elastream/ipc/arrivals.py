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

_QUANTILE_STEP = 0.05     # the jitter quantile moves by this share of itself (plus 1 µs) per arrival
_UP = 3.0                 # ... up 3x as far as down: it settles at the 75th percentile of |error|
_SCORE = 0.125            # EWMA weight of a polling window's hit (1) or miss (0)
_PROBE_EVERY = 8          # while the hit rate is poor, still try one window in this many
_PHASE = 0.25             # share of an arrival's (clipped) error that moves the next expected time
_FREQUENCY = 0.05         # ... and that corrects the gap
_CLIP = 3.0               # an error counts for at most this many times the current jitter
_STRIKES = 3              # arrivals in a row outside that bound: the rate changed, start over
_PAUSE_GAPS = 8           # an arrival this many gaps late: the stream paused, re-anchor


class ArrivalPredictor:
    """Predicts the next record's arrival and plans a polling window around it (a phase-locked clock).

    The expected time advances by the learned gap and is nudged by a quarter
    of each arrival's error, clipped to a few times the jitter: a late
    arrival (a stalled producer, a preempted vCPU) barely moves the schedule,
    so the next on-time record is still expected on time. The jitter is the
    75th percentile of the errors (a streaming quantile: arrival times on a
    VM are heavy-tailed, and one stall must not widen every later window).
    Three arrivals in a row far off the schedule mean the rate changed; the
    clock starts over, keeping the jitter. While most windows miss, only one
    in eight is tried, so a stream that cannot be predicted is not polled.

    ``duty``: the largest fraction of the gap spent polling (0 disables
    polling); ``min_lead``: the least time to poll before the expected arrival.

    Example::

        p = ArrivalPredictor(duty=0.1)
        for t in (0.00, 0.01, 0.02, 0.03):
            p.arrived(t)
        start, stop = p.plan(now=0.031)           # around 0.04
        assert start < 0.04 < stop and stop - start <= 0.1 * 0.01
    """

    __slots__ = ("duty", "min_lead", "last", "gap", "next", "dev", "lateness", "polls", "hits", "score",
                 "_strikes", "_skipped")

    def __init__(self, duty: float = 0.1, min_lead: float = 100e-6):
        self.duty = duty
        self.min_lead = min_lead
        self.last: float | None = None     # time the last record was seen
        self.gap: float | None = None      # learned gap between records
        self.next: float | None = None     # expected time of the next record
        self.dev = 0.0                     # 75th percentile of |arrival - expected| (the jitter)
        self.lateness = 100e-6             # 75th percentile of the consumer's timed-sleep overshoots (a guess)
        self.polls = 0                     # polling windows opened
        self.hits = 0                      # ... that saw the record arrive
        self.score = 1.0                   # smoothed hit rate of the windows
        self._strikes = 0
        self._skipped = 0

    def arrived(self, now: float) -> None:
        """A consumer that had to wait received a record published at ``now`` (one call per wait).

        Pass the producer's publish time, not the time the consumer noticed:
        noticed through a wake-up, every arrival is late by about the same
        amount, and a schedule learned from those would never open its window
        early enough to see one on time.
        """
        last = self.last
        if last is not None and now <= last:           # the same publish seen by two waits
            return
        self.last = now
        if last is None:
            return
        if self.gap is None or self.next is None or self._strikes >= _STRIKES:
            self._restart(now, now - last)
            return
        gap = self.gap
        periods = round((now - self.next) / gap)      # records missed since the last one (or a pause)
        if periods < 0:
            self._strikes += 1                        # early by half a gap or more: maybe a faster rate
            self.next = now + gap
            return
        error = now - (self.next + periods * gap)
        bound = max(_CLIP * self.dev, 2.0 * self.min_lead)
        if periods > _PAUSE_GAPS or (periods and abs(error) > bound):
            self.next = now + gap                     # after a pause the stream may resume at any phase
            return
        self._strikes = self._strikes + 1 if abs(error) > bound else 0
        clipped = min(bound, max(-bound, error))
        self.dev = _quantile_step(self.dev, abs(error))
        self.gap = gap + _FREQUENCY * clipped / (periods + 1)
        self.next += (periods + 1) * self.gap + _PHASE * clipped

    def _restart(self, now: float, gap: float) -> None:
        # the jitter is kept: a stream that keeps "changing rate" (Poisson, bursts) stays too jittery to poll
        self.gap, self.next, self._strikes = gap, now + gap, 0

    def lead(self) -> float:
        """How long before (and at least how long after) the expected arrival to poll."""
        return self.min_lead + 2.0 * self.dev

    def plan(self, now: float) -> tuple[float, float] | None:
        """``(start, stop)`` of the next polling window, or None: just sleep (no history, irregular, or past)."""
        if self.duty <= 0 or self.gap is None or self.next is None or self.gap <= 0:
            return None
        lead = self.lead()
        budget = self.duty * self.gap
        if 2.0 * lead + self.lateness > budget:       # a sleep that ends on time polls that much longer
            if 2.0 * lead <= budget:
                # refused for the sleeps' lateness alone: no timed sleep runs while this refuses, so it would
                # never be measured again; it decays as if a sleep had ended on time, and comes back up if the
                # sleeps after a re-try are really that late
                self.lateness = _quantile_step(self.lateness, 0.0)
            return None
        if self.score < 0.5:                          # mostly missing: probe now and then
            self._skipped += 1
            if self._skipped % _PROBE_EVERY:
                return None
        expected = self.next
        # late is likelier than early (a producer's timed sleep only ever overshoots): the window keeps
        # polling after the expected arrival for what is left of the duty budget; a record on time ends it
        stop = expected - lead + budget - self.lateness
        if stop <= now:
            return None
        return expected - lead, stop

    def sleep_until(self, start: float) -> float:
        """When to end a timed sleep so that, late as sleeps are, the consumer is up by ``start``."""
        return start - self.lateness

    def woke(self, planned: float, now: float) -> None:
        """A timed sleep meant to end at ``planned`` ended at ``now`` (records the overshoot)."""
        # a quantile, not a mean: the first sleep of a fresh process can end milliseconds late (cold code,
        # a preempted vCPU), and that one sample must not make every later window look unaffordable
        self.lateness = _quantile_step(self.lateness, max(0.0, now - planned))

    def polled(self, hit: bool) -> None:
        """A polling window ended, with the record seen (``hit``) or not."""
        self.polls += 1
        self.hits += hit
        self.score += _SCORE * (hit - self.score)


def _quantile_step(estimate: float, sample: float) -> float:
    """One step of the streaming 75th percentile: up three steps for a sample above, one down otherwise."""
    step = _QUANTILE_STEP * estimate + 1e-6
    return estimate + _UP * step if sample > estimate else max(0.0, estimate - step)
