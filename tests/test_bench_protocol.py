"""The learning protocol's bookkeeping (bench/learning.py): a run of one contender or one task
keeps the committed runs and rows of the others, and every row is the medians of the runs the
details hold, so that docs/benchmarks.md's table and the seeds under it never disagree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import learning  # noqa: E402


def run(task: str, who: str, seed: int, ret: float) -> dict:
    return {"task": task, "who": who, "seed": seed, "return": ret}


KEPT = [
    *(run("ppo-ant", "ours", s, r) for s, r in enumerate([4400.0, 4600.0, 4650.0])),
    *(run("ppo-ant", "peer", s, r) for s, r in enumerate([260.0, 220.0, 430.0])),
    *(run("ddpg-ant", "ours", s, r) for s, r in enumerate([1900.0, 1700.0, 1500.0])),
]


DETAILS = {"budget_s": 600.0, "runs": KEPT}


def test_runs_of_another_budget_are_not_merged() -> None:
    quick = [run("ppo-ant", "ours", 0, 100.0)]
    assert learning.merge_runs(DETAILS, quick, 60.0) == quick


def test_a_new_run_replaces_only_its_own_task_contender_and_seed() -> None:
    new = [run("ppo-ant", "sample-factory", s, 1000.0 + s) for s in range(3)]
    merged = learning.merge_runs(DETAILS, new, 600.0)
    assert len(merged) == len(KEPT) + 3
    again = learning.merge_runs(
        {"budget_s": 600.0, "runs": merged}, [run("ppo-ant", "ours", 1, 5000.0)], 600.0
    )
    ours = sorted(
        (r["seed"], r["return"]) for r in again if r["who"] == "ours" and r["task"] == "ppo-ant"
    )
    assert ours == [(0, 4400.0), (1, 5000.0), (2, 4650.0)]
    assert len(again) == len(merged)


def test_a_peer_run_alone_is_compared_with_ours_kept_runs_and_said_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    new = [run("ppo-ant", "sample-factory", s, r) for s, r in enumerate([900.0, 1200.0, 1100.0])]
    rows = learning.protocol_rows(learning.merge_runs(DETAILS, new, 600.0), new, 600.0, 3)
    # SB3's row ran neither side now: it stays as committed (with its date), not rewritten
    assert [row.metric.rsplit("vs ", 1)[1] for row in rows] == [
        "Sample Factory APPO (its MuJoCo example)"
    ]
    assert (rows[0].ours, rows[0].reference) == (4600.0, 1100.0)
    err = capsys.readouterr().err
    assert "ours and sample-factory were not run together" in err
    assert "sb3 were not run together" not in err


def test_ours_run_again_rewrites_every_peer_row_of_its_task(
    capsys: pytest.CaptureFixture[str],
) -> None:
    new = [run("ppo-ant", "ours", s, r) for s, r in enumerate([5000.0, 5100.0, 4900.0])]
    rows = learning.protocol_rows(learning.merge_runs(DETAILS, new, 600.0), new, 600.0, 3)
    (sb3,) = rows  # the row and the seeds under it in the docs must agree: new ours, kept peer
    assert (sb3.ours, sb3.reference) == (5000.0, 260.0)
    assert "ours and sb3 were not run together" in capsys.readouterr().err


def test_keep_others_keeps_the_rows_a_run_did_not_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    old = common.Row("a", 2.0, 1.0, "x", "higher")
    common.write_results("t", [old, common.Row("b", 1.0, 1.0, "x", "higher")])
    common.write_results("t", [common.Row("b", 3.0, 1.0, "x", "higher")], keep_others=True)
    rows = {r["metric"]: r["ours"] for r in json.loads((tmp_path / "t.json").read_text())}
    assert rows == {"a": 2.0, "b": 3.0}
    common.write_results("t", [common.Row("b", 4.0, 1.0, "x", "higher")])
    assert [r["metric"] for r in json.loads((tmp_path / "t.json").read_text())] == ["b"]


def test_the_long_run_compares_its_end_and_its_lowest_with_its_best_after_ten_minutes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Windows take only evaluations of snapshots taken after 10 minutes (the first 10 minutes
    of a long local run keep about one a minute): the sparse start never enters them."""
    early = [{"eval_return": 1000.0 + 400 * i, "wall_time": 60.0 * i} for i in range(10)]
    plateau = [{"eval_return": 5000.0, "wall_time": 600.0 + 20.0 * i} for i in range(1, 21)]
    dip = [{"eval_return": 1000.0, "wall_time": 1000.0 + 20.0 * i} for i in range(1, 6)]
    back = [{"eval_return": 4800.0, "wall_time": 1100.0 + 20.0 * i} for i in range(1, 21)]
    points = early + plateau + dip + back
    windows = learning.last_ten_windows(points, 600.0)
    assert len(windows) == 45 - 9 and windows[0] == 5000.0 and windows[-1] == 4800.0
    assert min(windows) == 2900.0  # 5 of 4,800 after the 5 of 1,000

    monkeypatch.setattr(learning, "local_experiment", lambda *a, **k: {"curve": points})
    monkeypatch.setattr(learning, "LONG_DETAILS", tmp_path / "long.json")
    at_end, lowest = learning.long_run_rows(1800.0)
    assert (at_end.ours, at_end.reference) == (4800.0, 5000.0)
    assert (lowest.ours, lowest.reference) == (2900.0, 5000.0)
    assert "30 min" in at_end.metric and "no collapse" in at_end.metric
    kept = json.loads((tmp_path / "long.json").read_text())
    assert kept["budget_s"] == 1800.0 and len(kept["points"]) == len(points)


def test_every_protocol_run_keeps_the_machine_speed_measured_just_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A return within a wall-clock budget depends on the machine's hour: each run records the
    bare environment's rate on all cores, measured right before it, so that runs of different
    hours can be told apart (docs/benchmarks.md shows its median beside the returns)."""
    events: list[tuple[str, str]] = []
    rates = iter([5000.0, 5100.0, 8600.0, 8700.0])

    def raw(env_id: str, seconds: float, processes: int) -> float:
        events.append(("raw", env_id))
        assert seconds == learning.RAW_SECONDS and processes >= 1
        return next(rates)

    def contender(who: str):
        def run_one(algorithm: str, env_id: str, budget: float, seed: int) -> dict:
            events.append((who, env_id))
            return {"return": 1000.0 + seed, "env_steps_per_s": 10.0, "evaluations": 60.0}

        return run_one

    monkeypatch.setattr(learning, "raw_env_limit", raw)
    monkeypatch.setattr(learning, "run_local", contender("ours"))
    monkeypatch.setattr(learning, "run_peer", contender("sb3"))
    runs = learning.protocol_runs(600.0, [0, 1], ["ppo-ant"], ["ours", "sb3"])
    assert (
        events == [("raw", "Ant-v5"), ("ours", "Ant-v5"), ("raw", "Ant-v5"), ("sb3", "Ant-v5")] * 2
    )
    assert [(r["who"], r["seed"], r["raw_env_steps_per_s"]) for r in runs] == [
        ("ours", 0, 5000.0),
        ("peer", 0, 5100.0),
        ("ours", 1, 8600.0),
        ("peer", 1, 8700.0),
    ]


@pytest.mark.parametrize(
    ("phase", "active"),
    [("Starting", True), ("Running", True), ("Stopping", True), ("Succeeded", False),
     ("Failed", False), ("Stopped", False)],
)  # fmt: skip
def test_a_local_run_is_over_only_once_its_final_phase_is_published(
    tmp_path: Path, phase: str, active: bool
) -> None:
    """`Stopping` comes before the final evaluation and the results: bench/local.py took it for
    the end and read a summary.json that was not there yet (a 20-minute run lost)."""
    (tmp_path / "state.json").write_text(json.dumps({"phase": phase}))
    assert common.local_run_active(tmp_path) is active


def test_a_bare_env_that_cannot_step_is_said_at_once_and_leaves_no_worker() -> None:
    """A worker that fails (here: an unknown environment) ends the measurement with its exit
    code, instead of a bare queue.Empty two minutes later, and no worker is left stepping."""
    import multiprocessing

    with pytest.raises(RuntimeError, match=r"bare NoSuchEnv-v0 could not be stepped: exit codes"):
        common.raw_env_limit("NoSuchEnv-v0", 1.0, 2)
    assert multiprocessing.active_children() == []
