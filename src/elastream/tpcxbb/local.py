"""The ``local`` engine: the §5 pipelines of :mod:`elastream.tpcxbb.pipelines` on elastream's own runtime.

``run_query(query, data_dir, params, options)`` builds the query's flow with
latency markers, runs it with ``es.Runner(threads=T, processes=P,
policy=NAME, batch_size=B)`` and returns a
:class:`~elastream.tpcxbb.engines.QueryRun`:

* ``seconds`` runs from the source's first read (the stamp of marker 0) to
  the end of the run, so worker-process start-up is not counted (as a Spark
  session's start-up is not); without markers it is the whole run;
* throughput = stream rows / ``seconds``;
* latency (ordered-multicore §7): the markers' source-to-sink times, keeping
  only the markers of the 20th–80th percentile of the stream (the paper's
  rule, which leaves out start-up and shut-down), reported as p50 and p99 in ms.

``options`` is the CLI namespace as a dict (or any mapping): ``threads``,
``processes``, ``policy``, ``batch_size``, ``marker_every``, ``placement``,
``timeout``; missing or ``None`` entries take the defaults of
:class:`LocalOptions`. An ``on_start(stream_rows, handle)`` entry is called on
this thread once the flow runs (``elastream demo`` shows progress from it).

Runs on the caller's thread (the runner's workers do the work).

Example::

    run = run_query("q03", Path("/tmp/tpcxbb"), Q03Params(), {"threads": 2, "policy": "lp"})
    run.answer.num_rows, run.tuples_per_second, run.latency_p99_ms
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from time import perf_counter
from typing import Any

import elastream as es
from elastream.tpcxbb import io
from elastream.tpcxbb.engines import QueryRun, add_argument_once
from elastream.tpcxbb.pipelines import QueryFlow, build_flow, markers_of
from elastream.tpcxbb.schema import QUERY_STREAM

ENGINE = "local"
#: Markers wanted per run when ``marker_every`` is left to the engine.
TARGET_MARKERS = 2_000
#: Fraction of the markers dropped at each end of the stream (ordered-multicore §7: 20th to 80th percentile).
TRIM = 0.2
DEFAULT_POLICY = "least_recently_run"
DEFAULT_BATCH_SIZE = 256


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """Options of the local engine (the CLI flags of :func:`add_arguments`)."""

    threads: int | None = None
    """None: elastic (the Runner sizes the threads while the query runs)."""
    processes: int | None = None
    policy: str = DEFAULT_POLICY
    batch_size: int = DEFAULT_BATCH_SIZE
    #: Rows between latency markers; 0: no markers; None: about TARGET_MARKERS per run.
    marker_every: int | None = None
    #: Runner placement for processes > 1 ("auto", "round_robin" or operator → process).
    placement: Any = "auto"
    #: Seconds before a run is shut down and TimeoutError raised (None: no limit).
    timeout: float | None = None
    #: Rows pyarrow decodes per batch at the source: small enough that decoding never stalls the pipeline long.
    batch_rows: int = 8_192
    #: How dynamic allotment keeps order (es.OrderingConfig: reorder and partitioning schemes); None: the default.
    ordering: Any = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> LocalOptions:
        """The entries of ``options`` that name a field and are not None; defaults for the rest."""
        chosen = {f.name: options[f.name] for f in fields(cls) if options.get(f.name) is not None}
        return cls(**chosen)


def add_arguments(parser: Any) -> None:
    """CLI flags of the local engine (the registry's hook)."""
    add_argument_once(parser, "--threads", type=int, default=None, metavar="T",
                      help="local: worker threads per process (default: elastic, from 1)")
    add_argument_once(parser, "--processes", type=int, default=None, metavar="P",
                      help="local: worker processes (default 1)")
    add_argument_once(parser, "--timeline", default=None, metavar="FILE",
                      help="local: write the elastic run's timeline to FILE (JSON) and a plot beside it (PNG)")
    add_argument_once(parser, "--policy", default=None, metavar="NAME",
                      help=f"local: scheduling policy, one of {', '.join(es.policies.available())} "
                           f"(default {DEFAULT_POLICY})")
    add_argument_once(parser, "--batch-size", type=int, default=None, metavar="B",
                      help=f"local: most tuples an operator takes per step (default {DEFAULT_BATCH_SIZE})")
    add_argument_once(parser, "--marker-every", type=int, default=None, metavar="N",
                      help=f"local: a latency marker every N stream rows (default: about {TARGET_MARKERS} "
                           "markers per run; 0: none)")


def marker_interval(rows: int, marker_every: int | None) -> int:
    """The rows between markers: ``marker_every``, or about TARGET_MARKERS per run (at least every 100 rows)."""
    if marker_every is not None:
        return marker_every
    return max(100, rows // TARGET_MARKERS)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0–100) of an ascending sequence.

    Example: ``percentile([1, 2, 3, 4], 50) == 2``
    """
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_ms(outputs: list, trim: float = TRIM) -> tuple[float | None, float | None]:
    """(p50, p99) in ms of the markers the sink collected, without the first and last ``trim`` of them by seq."""
    markers = sorted(markers_of(outputs), key=lambda m: m.seq)
    if not markers:
        return None, None
    cut = int(len(markers) * trim)
    kept = markers[cut:len(markers) - cut] or markers
    values = sorted(m.latency_s * 1e3 for m in kept)
    return percentile(values, 50), percentile(values, 99)


def run_query(query: str, data_dir: Path, params: Any, options: Mapping[str, Any]) -> QueryRun:
    """The ``local`` engine of :mod:`elastream.tpcxbb.engines`: run ``query``'s §5 pipeline on elastream."""
    opts = LocalOptions.from_mapping(options)
    rows = io.row_count(data_dir, QUERY_STREAM[query])
    qf = build_flow(query, data_dir, params, marker_every=marker_interval(rows, opts.marker_every),
                    batch_rows=opts.batch_rows)
    runner = es.Runner(threads=opts.threads, processes=opts.processes, policy=opts.policy,
                       batch_size=opts.batch_size, placement=opts.placement, ordering=opts.ordering)
    on_start = options.get("on_start")
    outputs, seconds, timeline = _run(qf, runner, opts.timeout,
                                      None if on_start is None else (lambda handle: on_start(rows, handle)))
    p50, p99 = latency_ms(outputs)
    if options.get("timeline") and timeline is not None:
        save_timeline(timeline, Path(options["timeline"]), title=f"{query} on elastream")
    return QueryRun(query=query, engine=ENGINE, answer=qf.finish(outputs), seconds=seconds, input_rows=rows,
                    latency_p50_ms=p50, latency_p99_ms=p99)


def save_timeline(timeline: Any, path: Path, title: str = "") -> tuple[Path, Path]:
    """Write ``timeline`` as JSON to ``path`` and its plot as PNG beside it; both paths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    timeline.save_json(path)
    return path, timeline.plot(path.with_suffix(".png"), title=title)


def _run(qf: QueryFlow, runner: es.Runner, timeout: float | None,
         on_start: Callable[[Any], None] | None = None) -> tuple[list, float, Any]:
    """Run the flow; (sink outputs, seconds from the first source read to the end, the run's timeline).

    ``on_start(handle)`` runs on this thread once the flow has started (a
    progress display may follow ``handle.stats()`` there until ``handle.done``).
    """
    started = perf_counter()
    try:
        handle = runner.start(qf.flow)
        try:
            if on_start is not None:
                on_start(handle)
            result = handle.wait(timeout)
        except TimeoutError:
            handle.shutdown(timeout=runner.config.scheduling.shutdown_grace_s + 3.0)
            raise
    except es.OperatorError as exc:
        if exc.operator == qf.source_name:
            raise _stream_error(qf, exc) from exc
        raise
    ended = perf_counter()
    outputs = result.outputs.get(qf.sink_name, [])
    first = min((m.stamp for m in markers_of(outputs) if m.seq == 0), default=started)
    return outputs, ended - max(first, started), result.timeline


def _stream_error(qf: QueryFlow, exc: es.OperatorError) -> io.TpcxbbDataError:
    """A source failure while reading (a file corrupt past its footer, or changed since validation), as a data error."""
    text = str(exc).splitlines()[0]
    file = next((str(f) for f in qf.stream_files if str(f) in str(exc)), None)
    return io.TpcxbbDataError(f"table {qf.stream_name!r}: {text}", table=qf.stream_name, file=file)
