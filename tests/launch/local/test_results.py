"""The learning curve and summary written at the end of a local run."""

from __future__ import annotations

import json
from pathlib import Path

from surreal_kube.launch.local.progress import Progress
from surreal_kube.launch.local.results import CurveRecorder, load_curve, write_results


def _evals(*recs: tuple[int, float, float], process: str = "evals-0") -> dict:
    """The processes of a Progress whose evaluator lists (evaluation, return, taken_at)."""
    recent = [
        {
            "evaluation": n,
            "return": r,
            "std": 0.5,
            "episodes": 5,
            "param_version": n,
            "param_env_steps": 100 * n,
            "taken_at": t,
        }
        for n, r, t in recs
    ]
    return {process: {"role": "eval", "recent_evaluations": recent}}


def test_one_point_per_evaluation_and_resume_continues_the_curve(tmp_path: Path) -> None:
    path = tmp_path / "curve.jsonl"
    rec = CurveRecorder(path)
    rec.record(Progress(env_steps=5), elapsed=1.0)  # no evaluation yet: nothing
    rec.record(Progress(processes=_evals((1, 1.0, 100.0))), elapsed=2.0, now=101.0)
    rec.record(Progress(processes=_evals((1, 1.0, 100.0))), elapsed=3.0, now=102.0)  # same one
    resumed = CurveRecorder(path)
    resumed.record(Progress(processes=_evals((1, 1.0, 100.0))), elapsed=4.0, now=103.0)
    resumed.record(Progress(processes=_evals((1, 1.0, 100.0), (2, 3.0, 104.0))), 5.0, now=105.0)
    assert [(p["env_steps"], p["eval_return"]) for p in load_curve(path)] == [
        (100, 1.0),
        (200, 3.0),
    ]


def test_evaluations_played_late_are_each_a_point_where_their_snapshot_was_taken(tmp_path):
    """An evaluator that played a backlog finishes several evaluations between two reads (issue
    28): before, the recorder kept one point per read, at the read's time."""
    path = tmp_path / "curve.jsonl"
    rec = CurveRecorder(path)
    later = _evals((1, 1.0, 1010.0), (2, 2.0, 1020.0), (3, 3.0, 1030.0))
    other = _evals((1, 5.0, 1015.0), process="evals-1")
    rec.record(Progress(processes={**later, **other}), elapsed=60.0, now=1060.0)
    points = load_curve(path)
    assert [p["eval_return"] for p in points] == [1.0, 5.0, 2.0, 3.0]  # in snapshot order
    assert [p["wall_time"] for p in points] == [10.0, 15.0, 20.0, 30.0]
    assert [p["env_steps"] for p in points] == [100, 100, 200, 300]
    assert points[0]["eval_std"] == 0.5 and points[0]["episodes"] == 5


def test_summary_and_picture(tmp_path: Path) -> None:
    rec = CurveRecorder(tmp_path / "curve.jsonl")
    for i in range(12):
        rec.record(Progress(processes=_evals((i + 1, float(i), float(i)))), elapsed=i, now=i)
    picture = write_results(
        tmp_path,
        name="exp",
        phase="Succeeded",
        reason="reached 1100 env steps",
        env_steps=1100,
        elapsed=11.0,
        restarts={"agents-0": 1},
        learner_iteration=7,
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_return"] == 11.0 and summary["best_return"] == 11.0
    assert summary["recent_mean_return"] == sum(range(2, 12)) / 10
    assert summary["env_steps_per_second"] == 100.0 and summary["total_restarts"] == 1
    assert picture == tmp_path / "learning_curve.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 5000


def test_points_carry_std_and_the_version_and_steps_of_the_parameters_evaluated(tmp_path):
    results = tmp_path / "results"
    status = tmp_path / "status"
    status.mkdir()
    recent = {"evaluation": 1, "return": 2.0, "std": 1.0, "episodes": 2, "taken_at": 0.0}
    evals = {"role": "eval", "recent_evaluations": [{**recent, "param_version": 7,
                                                     "param_env_steps": 1234}]}  # fmt: skip
    rec = CurveRecorder(results / "curve.jsonl")
    progress = Progress(env_steps=5000, eval_return=2.0, eval_count=1, processes={"evals-0": evals})
    rec.record(progress, elapsed=1.0, now=1.0)
    (point,) = load_curve(results / "curve.jsonl")
    assert point["env_steps"] == 1234  # the x axis TensorBoard uses for this score
    assert point["eval_std"] == 1.0 and point["episodes"] == 2 and point["param_version"] == 7
    learner = {
        "role": "learner",
        "extra": {
            "global_env_steps": 5000,
            "policy_lag": {"mean": 1.5, "p95": 3.0, "max": 4.0, "mean_all": 1.2, "bound": 3},
            "replay": {"samples_per_insert": 0.98, "target_samples_per_insert": 1.0},
        },
    }
    (status / "learner.json").write_text(json.dumps(learner))
    (status / "agents-0.json").write_text(json.dumps({"extra": {"replay_wait_seconds": 4.25}}))
    picture = write_results(
        results,
        name="e",
        phase="Succeeded",
        reason="budget",
        env_steps=5000,
        elapsed=10.0,
        restarts={},
        learner_iteration=3,
    )
    summary = json.loads((results / "summary.json").read_text())
    assert summary["final_return_std"] == 1.0 and summary["final_param_version"] == 7
    assert summary["episodes_per_evaluation"] == 2
    assert summary["policy_lag"]["p95"] == 3.0 and summary["replay"]["samples_per_insert"] == 0.98
    assert summary["agents_replay_wait_seconds"] == round(4.25, 1)
    assert picture.exists()
