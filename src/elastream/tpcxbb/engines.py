"""The registry of engines that answer the TPCx-BB queries, and the result they all return.

An engine is a function ``run(query, data_dir, params, options) -> QueryRun``
registered under a name (``spark-batch`` here; ``local`` and
``spark-streaming`` are added by their own modules). Entries name their
function as ``"module:function"`` and are imported only when used, so listing
engines (for the CLI's ``--engine`` choices) never starts a JVM. An engine
may also name an ``add_arguments(parser)`` hook for its own CLI flags
(``--threads``, ``--master`` …); ``options`` is then the parsed namespace as a
dict.

Module-level registry, written at import time and read afterwards; not meant
to be changed while queries run.

Example::

    register_engine("local", "elastream.tpcxbb.local:run_query", help="elastream pipelines (§5)",
                    add_arguments="elastream.tpcxbb.local:add_arguments")
    run = get_engine("spark-batch")("q04", data_dir, Q04Params(), {})
    run.answer.column_names == ["avg_pages"]
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class QueryRun:
    """One engine's answer to one query, with how long it took.

    ``seconds`` is the wall time of the query (not of engine start-up, e.g.
    a Spark session); ``input_rows`` the rows of the fact table or stream
    read; the latencies are ``None`` where the engine has no per-tuple latency
    (batch).
    """

    query: str
    engine: str
    answer: pa.Table
    seconds: float
    input_rows: int
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None

    @property
    def tuples_per_second(self) -> float:
        """Input rows per second of query time."""
        return self.input_rows / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object of ``elastream query``."""
        return {"query": self.query, "engine": self.engine, "rows": self.answer.num_rows,
                "seconds": self.seconds, "tuples_per_second": self.tuples_per_second,
                "latency_ms": {"p50": self.latency_p50_ms, "p99": self.latency_p99_ms}}


class EngineFunction(Protocol):
    """``run(query, data_dir, params, options) -> QueryRun``."""

    def __call__(self, query: str, data_dir: Path, params: Any, options: Mapping[str, Any]) -> QueryRun: ...


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """A registered engine: its function and optional CLI hook as ``module:function`` paths."""

    name: str
    target: str
    help: str
    add_arguments: str | None = None


_ENGINES: dict[str, EngineEntry] = {}


def register_engine(name: str, target: str, *, help: str = "",  # noqa: A002 - argparse's word
                    add_arguments: str | None = None) -> None:
    """Register (or replace) engine ``name`` implemented by ``target`` (``module:function``)."""
    for path in (target, add_arguments):
        if path is not None and path.count(":") != 1:
            raise ValueError(f"engine {name!r}: {path!r} is not 'module:function'")
    _ENGINES[name] = EngineEntry(name, target, help, add_arguments)


def available_engines() -> list[str]:
    """Registered engine names, in registration order."""
    return list(_ENGINES)


def engine_entry(name: str) -> EngineEntry:
    """The entry of engine ``name``; ``KeyError`` naming the registered ones otherwise."""
    try:
        return _ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; available: {', '.join(_ENGINES) or 'none'}") from None


def _resolve(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_engine(name: str) -> EngineFunction:
    """The run function of engine ``name`` (importing its module)."""
    fn: EngineFunction = _resolve(engine_entry(name).target)
    return fn


def add_argument_once(parser: Any, *flags: str, **kwargs: Any) -> None:
    """``parser.add_argument(*flags, **kwargs)`` unless another engine already added the flag (e.g. ``--master``)."""
    if any(flag in parser._option_string_actions for flag in flags):
        return
    parser.add_argument(*flags, **kwargs)


def add_engine_arguments(parser: Any) -> None:
    """Let every registered engine add its CLI flags to ``parser`` (an argparse parser)."""
    for entry in _ENGINES.values():
        if entry.add_arguments:
            _resolve(entry.add_arguments)(parser)


register_engine("spark-batch", "elastream.spark.batch:run_engine",
                help="Spark SQL batch reference answers (spec §4, §6)",
                add_arguments="elastream.spark.batch:add_arguments")
register_engine("local", "elastream.tpcxbb.local:run_query",
                help="elastream pipelines of spec §5 on this machine (threads, processes, policy)",
                add_arguments="elastream.tpcxbb.local:add_arguments")
register_engine("spark-streaming", "elastream.tpcxbb.spark_streaming:run_query",
                help="the §5 pipelines translated to Spark Structured Streaming from their declared operators",
                add_arguments="elastream.tpcxbb.spark_streaming:add_arguments")
