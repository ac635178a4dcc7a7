"""``es.Elastic``: how a run sizes its own parallelism while it runs (what ``Runner(elastic=...)`` takes).

``Runner()`` runs elastic with these defaults; ``Runner(elastic=False)`` turns
elasticity off; ``Runner(elastic=es.Elastic(period_s=1.0, controller="utilization"))``
tunes it. A count the user gives the Runner (``threads=``, ``processes=``)
fixes that level only; the others stay elastic.

Threading: an immutable value, made in the user's thread.

Example::

    es.Runner(elastic=es.Elastic(period_s=0.5, controller="trend")).run(flow)
"""

from __future__ import annotations

from dataclasses import dataclass

from elastream.elastic.controller import create_controller


@dataclass(frozen=True, slots=True)
class Elastic:
    """Elasticity settings.

    ``period_s``: how often the controllers look and decide. The papers use 10 s on
    long-running jobs; jobs here often last seconds, and 0.5 s is long enough for a
    period's rates to be stable (each holds thousands of batches) while a 10 s job
    still gets 20 decisions.
    ``controller``: "auto" (the trend thread controller of IBM §4.2 beside DS2's replica
    sizing), "trend" or "utilization" (C-Stream §4.1) for threads only, "ds2" for
    replicas only, or a name given to ``es.elastic.register_controller``.
    ``max_threads``: the most worker threads per process; above the cores only for
    operators that release the GIL while they wait (blocking I/O). None: the cores,
    or 4× the cores for GIL-releasing operators.
    ``max_processes``: the most worker processes (None: the cores).
    ``first_period_s``: the first period is this short (at most ``period_s``). A run starts at
    one process and one thread, so until the first decision a bottleneck runs on one core: on
    the keyed benchmark (a 2.5 s job) deciding at 0.5 s cost a tenth of the run. The rates of a
    fifth of a second already hold thousands of tuples (DS2 sizes from busy time, so the
    start-up's idle moments do not skew them).
    """

    period_s: float = 0.5
    controller: str = "auto"
    max_threads: int | None = None
    max_processes: int | None = None
    first_period_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("period_s", "first_period_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Elastic({name}=...) must be > 0, got {getattr(self, name)}")
        create_controller(self.controller)  # fail now on an unknown name
        for name in ("max_threads", "max_processes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Elastic({name}=...) must be >= 1, got {value}")


def elastic_from(value: bool | Elastic | None) -> Elastic | None:
    """What ``Runner(elastic=value)`` means: None (off) for False, the defaults for True or None."""
    if value is False:
        return None
    if value is True or value is None:
        return Elastic()
    if isinstance(value, Elastic):
        return value
    raise TypeError(f"Runner(elastic=...) takes True, False or es.Elastic(...), got {type(value).__name__}")
