"""The progress bar of ``elastream bench spark`` (and ``models``): one bar over the run's measurements, on stderr.

A run at scale 0.5 takes many minutes; the bar names the measurement under
way and counts the finished ones. It goes to stderr so ``--json`` keeps stdout
to the one JSON object. Used from the benchmark's thread only.

Example::

    with BenchProgress(total=3) as progress:
        with progress.working("q01 · local engine"):
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class BenchProgress:
    """A rich bar of ``total`` measurements; :meth:`working` shows one and counts it when it ends."""

    def __init__(self, total: int, console: Console | None = None, description: str = "elastream bench spark") -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=console or Console(stderr=True))
        self._task = self._progress.add_task(description, total=total)

    def __enter__(self) -> BenchProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    @contextmanager
    def working(self, label: str) -> Iterator[None]:
        """Show ``label`` while the block runs; count it done afterwards (also when it fails)."""
        self._progress.update(self._task, description=label)
        try:
            yield
        finally:
            self._progress.advance(self._task)

    def advance(self, label: str) -> None:
        """Count a step that needed no work (e.g. data given with ``--data``)."""
        self._progress.update(self._task, description=label, advance=1)
