"""The demo flow (DESIGN.md's Barrier sample, fed from a CSV file).

``write_sensor_csv`` writes ``id,sensor,temperature,humidity`` rows;
``build_demo_flow`` reads the file twice — one source per column it needs —
zips the two streams one row from each with ``es.ops.Barrier(2)``, combines
each pair with a Map and collects the records::

    temperature (FromCSV) ─┐
                           ├─ Barrier(2) ─ Map(combine) ─ Collect
    humidity    (FromCSV) ─┘

Example::

    path = write_sensor_csv(tmp_path / "sensors.csv", rows=1000)
    flow, sink = build_demo_flow(path)
    rows = es.Runner(threads=2).run(flow).outputs[sink]
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import elastream as es
from elastream.operators.base import Operator, SourceOperator

SINK = "records"
SENSORS = 16


def cache_dir() -> Path:
    """The demo's folder: ``$ELASTREAM_CACHE/demo``, else ``~/.cache/elastream/demo``."""
    root = os.environ.get("ELASTREAM_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "elastream"
    return base / "demo"


def write_sensor_csv(path: str | os.PathLike[str], rows: int) -> Path:
    """Write ``rows`` deterministic sensor readings to ``path`` (atomically); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "sensor", "temperature", "humidity"])
        for i in range(rows):
            w.writerow([i, f"s{i % SENSORS:02d}", f"{15 + (i * 37 % 200) / 10:.1f}", f"{20 + (i * 53 % 700) / 10:.1f}"])
    os.replace(tmp, path)
    return path


class _CsvColumns(SourceOperator):
    """Stand-in for ``es.ops.FromCSV`` (rows as dicts, ``types`` applied) while that operator is absent."""

    def __init__(self, path: str | os.PathLike[str], *, types: Mapping[str, Callable[[str], Any]]):
        super().__init__(outputs=1)
        self.path = Path(path)
        self.types = dict(types)
        self._file: Any = None
        self._rows: Any = None

    def open(self, ctx: Any) -> None:
        self._file = open(self.path, newline="", encoding="utf-8")
        self._rows = csv.DictReader(self._file)

    def next_batch(self, max_items: int) -> list | None:
        out = []
        for row in self._rows:
            for name, fn in self.types.items():
                row[name] = fn(row[name])
            out.append(row)
            if len(out) >= max_items:
                break
        return out or None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def csv_source(path: str | os.PathLike[str], types: Mapping[str, Callable[[str], Any]]) -> Operator:
    """``es.ops.FromCSV(path, types=types)`` when the engine has it, else a minimal local reader."""
    if hasattr(es.ops, "FromCSV"):
        return es.ops.FromCSV(path, types=dict(types))
    return _CsvColumns(path, types=types)


def combine(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Join one temperature row and one humidity row (read from the same line of the file)."""
    t, h = pair
    temp, hum = t["temperature"], h["humidity"]
    return {"id": t["id"], "aligned": t["id"] == h["id"], "sensor": t["sensor"], "temperature": temp,
            "humidity": hum, "dew_point": round(temp - (100.0 - hum) / 5.0, 2)}


def build_demo_flow(path: str | os.PathLike[str]) -> tuple[es.Flow, str]:
    """The demo flow over the CSV at ``path``; returns (flow, sink name)."""
    flow = es.Flow("demo")
    temperature = flow.add(csv_source(path, {"id": int, "temperature": float}), name="temperature")
    humidity = flow.add(csv_source(path, {"id": int, "humidity": float}), name="humidity")
    barrier = flow.add(es.ops.Barrier(2), name="barrier")
    flow.connect(temperature.out(0), barrier.in_(0))
    flow.connect(humidity.out(0), barrier.in_(1))
    barrier >> flow.add(es.ops.Map(combine), name="combine") >> flow.add(es.ops.Collect(), name=SINK)
    return flow, SINK
