"""``elastream bench keyed`` on tiny settings: JSON shape, output checked against the plain loop, tables.

Behaviour only, never speed (the speed goal is read from the benchmark's own output).
"""

from __future__ import annotations

import json

import pytest

from elastream.bench import keyed
from elastream.cli.main import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

TINY = ["--tuples", "3000", "--keys", "50", "--cost-us", "2", "--repeat", "1", "--partitions", "8"]


def test_bench_keyed_json_compares_plain_loop_and_processes(capsys):
    assert main(["bench", "keyed", *TINY, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "keyed" and result["gil"] == "hold" and "process parallelism" in result["note"]
    rows = result["results"]
    assert [r["config"] for r in rows] == ["plain loop", "hand-split 2 processes", "elastream P=1", "elastream P=2",
                                           "Runner()", "Runner(processes=2)"]
    assert all(r["output_equal"] in (True, None) and r["seconds"] > 0 for r in rows)
    defaults, rows = rows[4:], rows[:4]  # as a user writes them, against the hand-tuned P=2 of the same runs
    assert all(r["share_of_hand_tuned_p2"] == pytest.approx(rows[3]["seconds"] / r["seconds"]) for r in defaults)
    assert rows[3]["placement"]["sum#0"] != rows[3]["placement"]["sum#1"]
    assert rows[0]["speedup_vs_plain"] == 1.0
    # the share of processes x wall-clock time the per-tuple function's operator (or its replicas) was busy
    assert all(0.0 < r["engine_efficiency"] <= 1.0 for r in rows[2:]) and "engine_efficiency" not in rows[0]
    for r in rows[2:]:  # what the function missed of processes x wall-clock seconds, and where it went
        losses = r["engine_losses"]
        assert losses["lost_s"] == pytest.approx(r["processes"] * r["seconds"] * (1 - r["engine_efficiency"]))
        assert losses["own_work_s"] > 0 and losses["idle_s"] >= 0 and losses["not_alive_s"] > 0
        assert sum(losses[k] for k in ("own_work_s", "idle_s", "not_alive_s", "between_s")) == \
            pytest.approx(losses["lost_s"])
    # each run over the plain loop of its own repetition (one repetition here: the best times' ratio)
    assert rows[3]["speedup_paired"]["median"] == pytest.approx(rows[3]["speedup_vs_plain"])
    # the function's seconds over the plain loop's close the account: processes x efficiency / slowdown
    assert rows[1]["function_slowdown"]["best_run"] > 0 and "function_slowdown" not in rows[0]
    for r in rows[2:]:
        slowdown = r["function_slowdown"]
        assert slowdown["best_run"] == slowdown["median"] > 0
        assert keyed.paired_from_parts(r) == pytest.approx(r["speedup_vs_plain"])
    ceiling = result["two_core_ceiling"]  # both pool processes burning at once vs one alone
    # A plausible ratio, not a speed check: one 0.1 s slice alone that falls in a slow phase of the VM
    # makes a single repetition's ratio exceed 2 (2.51 seen in CI).
    assert 0.5 < ceiling["median"] < 4.0 and len(ceiling["runs"]) == 1 and ceiling["low"] <= ceiling["high"]


def test_bench_keyed_table_names_the_goal_and_the_gil_case(capsys):
    assert main(["bench", "keyed", *TINY, "--processes", "2", "--start-method", "spawn", "--no-default-rows"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "P=2 / plain loop" in out and "1.8x goal" in out and "process parallelism" in out
    assert "two-core ceiling" in out and "engine efficiency" in out and "paired by repetition" in out


def test_bench_keyed_bytewax_row_checks_its_outputs(capsys):
    assert main(["bench", "keyed", *TINY, "--no-hand", "--processes", "2", "--bytewax", "--json",
                 "--no-default-rows"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["config"]: r for r in result["results"]}
    row = rows["Bytewax 2 processes"]
    assert row["output_equal"] is True and row["seconds"] > 0 and row["reference"] is True
    assert row["speedup_vs_plain"] == pytest.approx(rows["plain loop"]["seconds"] / row["seconds"])


def test_bytewax_worker_failure_is_reported_not_waited_for():
    from elastream.bench._keyed_bytewax import run_two_processes

    with pytest.raises(RuntimeError, match="Bytewax worker failed"):
        run_two_processes([(1, 2), (3, "not a number")], rounds=1)  # burn() fails on the str


def test_paired_speedups_compare_runs_of_one_repetition():
    paired = keyed.paired_speedups({"plain": [4.0, 3.0, 5.0], "p2": [2.0, 2.0, 2.0]}, "p2")
    assert (paired["low"], paired["median"], paired["high"]) == (1.5, 2.0, 2.5)
    assert keyed.paired_speedups({"plain": [4.0, 3.0], "p2": [2.0, 2.0]}, "p2")["median"] == 1.75
    assert keyed.paired_speedups({"plain": [4.0]}, "p2") is None


def test_plain_loop_and_flow_agree_on_the_running_sums():
    data = keyed.make_data(500, 7, seed=1)
    out = keyed.plain_loop(data, rounds=3)
    sums: dict[int, int] = {}
    for (k, v), (k2, s) in zip(data, out):
        sums[k] = sums.get(k, 0) + keyed.burn(v, 3)
        assert k == k2 and s == sums[k]


def test_calibration_is_rescaled_only_when_the_check_pass_runs_too_cheap():
    # A slow phase of the machine only makes work look dearer: only a too-cheap pass re-scales.
    assert keyed.rescaled_rounds(300, 20.0, 12.0) == 500
    assert keyed.rescaled_rounds(300, 20.0, 19.0) == 300   # within the tolerance: left alone
    assert keyed.rescaled_rounds(300, 20.0, 30.0) == 300


def test_ceiling_summary_skips_runs_without_a_pair():
    summary = keyed._ceiling_summary([1.6, float("nan"), 1.8, 1.7])
    assert (summary["low"], summary["median"], summary["high"]) == (1.6, 1.7, 1.8) and len(summary["runs"]) == 4
    assert keyed._ceiling_summary([]) is None and keyed._ceiling_summary([float("nan")]) is None


def test_burn_for_counts_calls_in_its_time():
    calls, pid = keyed.burn_for((1, 0.01))
    assert calls >= 100 and calls % 100 == 0 and pid > 0


def test_function_slowdowns_pair_each_run_with_its_plain_loop():
    times = {"plain": [4.0, 3.0, 5.0], "p2": [2.0, 1.9, 2.5]}
    details = {"p2": [{"function_s": 4.4}, {"function_s": 3.6}, {"function_s": 5.25}]}
    slowdown = keyed.function_slowdowns(times, details, "p2")  # 1.1, 1.2, 1.05
    assert slowdown["best_run"] == pytest.approx(1.2) and slowdown["median"] == pytest.approx(1.1)
    row = {"processes": 2, "engine_efficiency": 3.6 / (2 * 1.9), "function_slowdown": slowdown}
    assert keyed.paired_from_parts(row) == pytest.approx(3.0 / 1.9)  # that repetition's plain loop / run


def test_engine_losses_split_what_the_function_missed():
    from types import SimpleNamespace as NS

    stats = NS(operators={"sum#0": NS(busy_s=1.6), "sum#1": NS(busy_s=1.7), "sum#split": NS(busy_s=0.1)},
               workers=(NS(busy_s=1.8, idle_s=0.05, alive_s=1.95), NS(busy_s=1.75, idle_s=0.1, alive_s=1.9)))
    losses = keyed.engine_losses(stats, 2, 2.0)  # 4 core-seconds, the function had 3.3
    assert losses["lost_s"] == pytest.approx(0.7) and losses["own_work_s"] == pytest.approx(0.25)
    assert losses["idle_s"] == pytest.approx(0.15) and losses["not_alive_s"] == pytest.approx(0.15)
    assert losses["between_s"] == pytest.approx(0.15)


def test_readme_paragraph_names_the_p2_losses():
    from elastream.bench.report import _keyed_md

    rows = [{"config": "plain loop", "processes": 1, "seconds": 4.0, "tuples_per_s": 5e4, "speedup_vs_plain": 1.0},
            {"config": "elastream P=2", "processes": 2, "seconds": 2.0, "tuples_per_s": 1e5, "speedup_vs_plain": 2.0,
             "engine_efficiency": 0.825, "engine_losses": {"lost_s": 0.7, "own_work_s": 0.25, "idle_s": 0.15,
                                                           "not_alive_s": 0.15, "between_s": 0.15}}]
    text = _keyed_md({"command": "elastream bench keyed --json", "tuples": 200_000, "keys": 1000, "cost_us": 20.0,
                      "goal_speedup_p2": 1.8, "note": "GIL case: hold.", "results": rows})
    assert "Of the 4.00 core-seconds of that run the function missed 0.70: elastream's own operators 0.25" in text
    rows[1]["function_slowdown"] = {"best_run": 0.825, "median": 0.9}
    rows.insert(1, {"config": "hand-split 2 processes", "processes": 2, "seconds": 2.1, "tuples_per_s": 9e4,
                    "speedup_vs_plain": 1.9, "function_slowdown": {"best_run": 1.02, "median": 1.05}})
    text = _keyed_md({"command": "elastream bench keyed --json", "tuples": 200_000, "keys": 1000, "cost_us": 20.0,
                      "goal_speedup_p2": 1.8, "note": "GIL case: hold.", "results": rows})
    assert ("Per tuple, the function itself took 0.82× the plain loop's time in that run (median of the runs 0.90×; "
            "the hand-split's workers, both cores busy without elastream: median 1.05×), so that run gave "
            "2 × 82% ÷ 0.82 = 2.00× the plain loop timed just before it.") in text


def test_readme_paragraph_compares_bytewax_and_spark_with_p2():
    from elastream.bench.report import _keyed_md

    rows = [{"config": "plain loop", "processes": 1, "seconds": 4.0, "tuples_per_s": 5e4, "speedup_vs_plain": 1.0},
            {"config": "elastream P=2", "processes": 2, "seconds": 2.0, "tuples_per_s": 1e5, "speedup_vs_plain": 2.0},
            {"config": "Bytewax 2 processes", "processes": 2, "seconds": 3.0, "tuples_per_s": 6.7e4,
             "speedup_vs_plain": 4.0 / 3.0, "reference": True},
            {"config": "Spark local[2] applyInPandasWithState", "processes": None, "seconds": 9.0,
             "tuples_per_s": 2.2e4, "speedup_vs_plain": 4.0 / 9.0, "reference": True}]
    text = _keyed_md({"command": "elastream bench keyed --spark --json", "tuples": 200_000, "keys": 1000,
                      "cost_us": 20.0, "goal_speedup_p2": 1.8, "note": "GIL case: hold.", "results": rows,
                      "spark": {"master": "local[2]", "micro_batches": 4, "state_partitions": 2}})
    assert ("Spark Structured Streaming on the same job (local[2], `groupBy(key).applyInPandasWithState` keeping "
            "each key's sum in the group state, 4 micro-batches, outputs checked equal): 0.44× the plain loop; "
            "elastream P=2 is **4.5×** faster.") in text
    assert "| Spark local[2] applyInPandasWithState | 9.000 |" in text
    assert ("checked equal): 1.33× the plain loop; elastream P=2 is **1.50×** faster.") in text


def test_function_busy_counts_the_operator_or_its_replicas_only():
    from types import SimpleNamespace as NS

    ops = {"sum": NS(busy_s=1.0), "sum#0": NS(busy_s=2.0), "sum#1": NS(busy_s=3.0), "sum#split": NS(busy_s=5.0),
           "sum#merge": NS(busy_s=7.0), "summary#0": NS(busy_s=11.0), "src": NS(busy_s=13.0)}
    assert keyed.function_busy_s(NS(operators=ops)) == 6.0
