"""The README's benchmark headlines put what the default runners reach beside the tuned figures.

A user writes ``es.Runner()`` or ``es.Runner(processes=2)`` and nothing else, so the
headline of every benchmark that times those rows quotes them (``bench report``).
"""

from __future__ import annotations

from elastream.bench.report import _HEADLINES, _RENDERERS


def overhead_result() -> dict:
    rows = [{"threads": 1, "fuse": True, "engine_tuples_per_s": 2.9e6, "plain_loop_tuples_per_s": 3.2e6,
             "ratio": 0.91, "cpu_ratio": 0.9, "engine_cores_used": 1.0},
            {"threads": "Runner()", "fuse": True, "engine_tuples_per_s": 2.8e6, "plain_loop_tuples_per_s": 3.2e6,
             "ratio": 0.88, "cpu_ratio": 0.9, "engine_cores_used": 1.0}]
    return {"benchmark": "overhead", "functions": 12, "tuples": 1_000_000, "plain_loop_kind": "unrolled",
            "note": "GIL case: hold.", "results": rows, "command": "elastream bench overhead --json"}


def chain_result() -> dict:
    def job(tuples: int, shares: dict[str, float | None]) -> dict:
        return {"tuples": tuples, "ideal_s": 1.0,
                "rows": [{"config": c, "seconds": 1.0 / (s or 0.5), "share_of_2core_ideal": s}
                         for c, s in shares.items()]}
    return {"benchmark": "chain", "ops": 12, "cost_us": 100.0, "repeat": 3, "note": "GIL case: hold.",
            "command": "elastream bench chain --json",
            "jobs": [job(3000, {"plain loop": None, "Runner()": 0.83, "Runner(processes=2)": 0.96}),
                     job(30000, {"plain loop": None, "Runner()": 0.96, "Runner(processes=2)": 0.97})]}


def test_the_overhead_headline_quotes_plain_runner_beside_one_thread():
    _, text = _HEADLINES["overhead"](overhead_result())
    assert "at 1 thread: 0.91×" in text and "plain `Runner()` 0.88×" in text


def test_the_latency_headline_quotes_plain_runner_p99():
    rows = [{"threads": 1, "p50_ms": 0.048, "p99_ms": 0.135}, {"threads": "Runner()", "p50_ms": 0.053, "p99_ms": 0.138}]
    _, text = _HEADLINES["latency"]({"rate": 5000.0, "results": rows})
    assert "p99 0.135 ms" in text and "plain `Runner()` p99 0.138 ms" in text


def test_the_keyed_headline_quotes_both_default_runners():
    rows = [{"config": "plain loop", "seconds": 4.0, "speedup_vs_plain": 1.0},
            {"config": "elastream P=2", "seconds": 2.2, "speedup_vs_plain": 1.82, "engine_efficiency": 0.95},
            {"config": "Runner()", "seconds": 2.4, "speedup_vs_plain": 1.67},
            {"config": "Runner(processes=2)", "seconds": 2.3, "speedup_vs_plain": 1.74}]
    _, text = _HEADLINES["keyed"]({"results": rows})
    assert "P=2: 1.82×" in text and "`Runner()` 1.67×" in text and "`Runner(processes=2)` 1.74×" in text


def test_the_chain_job_has_a_table_and_a_headline_of_the_default_runners():
    result = chain_result()
    name, text = _HEADLINES["chain"](result)
    assert name == "Fixed-size chain job"
    assert "3,000 tuples: `Runner()` 0.83, `Runner(processes=2)` 0.96" in text
    assert "30,000 tuples: `Runner()` 0.96, `Runner(processes=2)` 0.97" in text
    table = _RENDERERS["chain"](result)
    assert "| 3,000 | Runner(processes=2) |" in table and "| 30,000 | plain loop |" in table
