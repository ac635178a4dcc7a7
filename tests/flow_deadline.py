"""Run a flow with a deadline that turns a hang into a failure naming the stuck operators.

A plain module (not in conftest.py) so that any test file can import it: the
suites have two conftest modules, and ``from conftest import ...`` would get
whichever pytest loaded last.
"""

from __future__ import annotations

import pytest

import elastream as es


def run_with_deadline(flow: es.Flow, timeout: float = 30.0, **runner_kw) -> es.RunResult:
    """``Runner(**runner_kw).run(flow)``, but a hang becomes a failure that names the stuck operators."""
    handle = es.Runner(**runner_kw).start(flow)
    try:
        return handle.wait(timeout)
    except TimeoutError:
        states = handle.states()
        try:
            handle.shutdown(timeout=5.0)
        except Exception:  # noqa: BLE001 - the hang is the failure to report
            pass
        pytest.fail(f"flow {flow.name!r} did not finish within {timeout} s "
                    f"({runner_kw}); operator states: {states}")
