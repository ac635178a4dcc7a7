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
import ring_payloads
from elastream.ipc import _sync
from elastream.processes import child, forkserver
from elastream.processes.forkserver import (_pickled_modules, precompilable_sources, preloadable_modules,
                                            worker_modules)

pytestmark = pytest.mark.timeout(30)


def test_the_modules_a_spec_names_are_preloaded():
    payload = cloudpickle.dumps([es.ops.Collect(), partial(json.dumps, indent=1)])
    names = preloadable_modules(worker_modules([payload]))
    assert "elastream.ops.sinks" in names and "json" in names
    assert "__main__" not in names


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickled_modules_are_found_in_every_protocol(protocol):
    payload = pickle.dumps([os.path.join, json.dumps, os.path.join], protocol=protocol)
    assert {"json"} <= _pickled_modules(payload)
    assert _pickled_modules(payload) & {"posixpath", "ntpath", "os.path"}


def test_modules_outside_the_stdlib_and_elastream_are_not_shared_through_the_fork_server():
    # numpy seeds its global generator at import: workers forked from one import would share it
    wanted = worker_modules([cloudpickle.dumps([np.add, json.dumps, ring_payloads.make_payload])])
    names = preloadable_modules(wanted)
    assert "json" in names and not [n for n in names if n.split(".")[0] in ("numpy", "_pytest", "pytest")]
    # the test suite's own module is only compiled in the server; numpy's are not sources (.py) of ours
    assert ring_payloads.__file__ in precompilable_sources(wanted)


def test_modules_not_imported_here_are_left_out():
    payload = pickle.dumps(b"x")  # no globals at all
    assert _pickled_modules(b"not a pickle") == set()
    assert worker_modules([payload]) <= set(sys.modules)


def test_a_fork_server_adopts_the_parents_path_and_compiles_the_sources_it_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(forkserver.CompiledSources, "_installed", None)
    from importlib.machinery import SourceFileLoader

    monkeypatch.setattr(SourceFileLoader, "source_to_code", SourceFileLoader.source_to_code)
    module = tmp_path / "es_precompiled_probe.py"
    module.write_text("VALUE = 41 + 1\n")
    last = sys.path[-1]
    monkeypatch.setenv(forkserver.FORKSERVER_SETUP_ENV, json.dumps({"sys_path": [str(tmp_path), last],
                                                               "compile": [str(module)]}))
    forkserver.set_up_fork_server()
    assert sys.path[:2] == [str(tmp_path), last] and sys.path.count(last) == 1
    assert forkserver.FORKSERVER_SETUP_ENV not in os.environ
    compiled = forkserver.CompiledSources._installed.code[str(module)][1]
    loader = SourceFileLoader("es_precompiled_probe", str(module))
    assert loader.get_code("es_precompiled_probe") is compiled          # same source: no compile
    module.write_text("VALUE = 7\n")
    assert loader.get_code("es_precompiled_probe") is not compiled      # changed since: compiled as usual
    namespace: dict = {}
    exec(loader.get_code("es_precompiled_probe"), namespace)
    assert namespace["VALUE"] == 7


def test_warm_up_resolves_the_atomics_once():
    child.warm_up()
    first = _sync._raw_functions()
    assert _sync._raw_functions() is first
    words = _sync.AtomicWords(memoryview(bytearray(16)))
    try:
        assert words.fetch_add(8, 3) == 0 and words.cas(8, 3, 4)
    finally:
        words.release()
