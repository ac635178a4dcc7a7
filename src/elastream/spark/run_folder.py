"""The folder of a Spark run: the query's checkpoint, the fed steps, the sinks' batches, and what run it holds.

A run folder given by the caller is kept. It holds ``run.json``, what the run
is (the flow's name and operators, the source files and how they are cut into
steps); a later run of the same flow over the same steps on that folder
*resumes* it (:mod:`elastream.spark.feeding`): after a failure or a stop, it
carries on from Spark's checkpoint and gives the answer an uninterrupted run
gives. A folder holding another run, or anything but a run, is refused.

Threading: used by the driver thread.

Example::

    folder = RunFolder.open("ckpt", manifest)     # new: creates it; same run: resumes it
    folder.checkpoint, folder.resumed
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastream.spark.failures import SparkRunOptionError

MANIFEST = "run.json"


@dataclass(frozen=True, slots=True)
class RunFolder:
    """Where a run keeps its checkpoint (``root/checkpoint``), fed steps and sink batches."""

    root: Path
    temporary: bool
    resumed: bool

    @classmethod
    def open(cls, checkpoint_dir: str | Path | None, manifest: dict[str, Any]) -> RunFolder:
        """A temporary folder (``checkpoint_dir`` None), a new one, or the used folder of this very run (resumed).

        Raises FileExistsError for a folder that holds something else,
        :class:`~elastream.spark.failures.SparkRunOptionError` (a ValueError) for
        the folder of another run (naming what differs).
        """
        manifest = json.loads(json.dumps(manifest))  # as it reads back (lists, not tuples)
        if checkpoint_dir is None:
            return cls(Path(tempfile.mkdtemp(prefix="elastream-spark-")), True, False)
        root = Path(checkpoint_dir)
        if root.exists() and any(root.iterdir()):
            _check_same_run(root, manifest)
            return cls(root, False, True)
        root.mkdir(parents=True, exist_ok=True)
        (root / MANIFEST).write_text(json.dumps(manifest, indent=1))
        return cls(root, False, False)

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoint location."""
        return self.root / "checkpoint"

    @property
    def sink_batches(self) -> Path | None:
        """Where the sinks' batches are kept (a kept folder only: a temporary run cannot resume)."""
        return None if self.temporary else self.root / "sink"

    def remove_if_temporary(self) -> None:
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)


def _check_same_run(root: Path, manifest: dict[str, Any]) -> None:
    path = root / MANIFEST
    if not path.is_file():
        # Spark would resume whatever query that checkpoint holds instead of running this one from the start.
        raise FileExistsError(f"checkpoint folder {root} is not empty and holds no elastream run; "
                              "give a new or empty folder")
    kept = json.loads(path.read_text())
    differs = sorted(k for k in set(kept) | set(manifest) if kept.get(k) != manifest.get(k))
    if differs:
        raise SparkRunOptionError(f"checkpoint folder {root} holds another run (its {', '.join(differs)} differ); "
                                  "resume it with the same flow, parameters, files and batch size, "
                                  "or give a new or empty folder")
