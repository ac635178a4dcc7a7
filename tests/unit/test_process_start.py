"""What a worker process needs at its start is done once, before forking: fork-server preload and warm-up."""

from __future__ import annotations

import json
import os
import pickle
import sys
from functools import partial

import cloudpickle
import numpy as np
import pytest

import elastream as es
from elastream.ipc import _sync
from elastream.processes import child
from elastream.processes.supervisor import _pickled_modules, preloadable_modules

pytestmark = pytest.mark.timeout(30)


def test_the_modules_a_spec_names_are_preloaded():
    payload = cloudpickle.dumps([es.ops.Collect(), partial(json.dumps, indent=1)])
    names = preloadable_modules([payload])
    assert "elastream.ops.sinks" in names and "json" in names
    assert "__main__" not in names


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickled_modules_are_found_in_every_protocol(protocol):
    payload = pickle.dumps([os.path.join, json.dumps, os.path.join], protocol=protocol)
    assert {"json"} <= _pickled_modules(payload)
    assert _pickled_modules(payload) & {"posixpath", "ntpath", "os.path"}


def test_modules_outside_the_stdlib_and_elastream_are_not_shared_through_the_fork_server():
    # numpy seeds its global generator at import: workers forked from one import would share it
    names = preloadable_modules([cloudpickle.dumps([np.add, json.dumps])])
    assert "json" in names and not [n for n in names if n.split(".")[0] in ("numpy", "_pytest", "pytest")]


def test_modules_not_imported_here_are_left_out():
    payload = pickle.dumps(b"x")  # no globals at all
    assert _pickled_modules(b"not a pickle") == set()
    assert set(preloadable_modules([payload])) <= set(sys.modules)


def test_a_fork_server_adopts_the_parents_path_and_drops_the_variable(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    last = sys.path[-1]
    monkeypatch.setenv(child.FORKSERVER_PATH_ENV, json.dumps(["/nowhere/a", last]))
    child._adopt_parent_path()
    assert sys.path[:2] == ["/nowhere/a", last] and sys.path.count(last) == 1
    assert child.FORKSERVER_PATH_ENV not in os.environ


def test_warm_up_resolves_the_atomics_once():
    child.warm_up()
    first = _sync._raw_functions()
    assert _sync._raw_functions() is first
    words = _sync.AtomicWords(memoryview(bytearray(16)))
    try:
        assert words.fetch_add(8, 3) == 0 and words.cas(8, 3, 4)
    finally:
        words.release()
