"""The learning curve and summary written at the end of a local run."""

from __future__ import annotations

import json
from pathlib import Path

from surreal_kube.launch.local.progress import Progress
from surreal_kube.launch.local.results import CurveRecorder, load_curve, write_results


def test_one_point_per_evaluation_and_resume_continues_the_curve(tmp_path: Path) -> None:
    path = tmp_path / "curve.jsonl"
    rec = CurveRecorder(path)
    rec.record(Progress(env_steps=5), elapsed=1.0)  # no evaluation yet: nothing
    rec.record(Progress(env_steps=10, eval_return=1.0, eval_count=1), elapsed=2.0)
    rec.record(Progress(env_steps=20, eval_return=1.0, eval_count=1), elapsed=3.0)  # same eval
    resumed = CurveRecorder(path)
    resumed.record(Progress(env_steps=30, eval_return=1.0, eval_count=1), elapsed=4.0)
    resumed.record(Progress(env_steps=40, eval_return=3.0, eval_count=2), elapsed=5.0)
    assert [(p["env_steps"], p["eval_return"]) for p in load_curve(path)] == [(10, 1.0), (40, 3.0)]


def test_summary_and_picture(tmp_path: Path) -> None:
    rec = CurveRecorder(tmp_path / "curve.jsonl")
    for i in range(12):
        rec.record(Progress(env_steps=100 * i, eval_return=float(i), eval_count=i + 1), elapsed=i)
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
    evals = {
        "role": "eval",
        "last_return": 2.0,
        "last_returns": [1.0, 3.0],
        "evaluations": 1,
        "param_version": 7,
        "param_env_steps": 1234,
    }
    rec = CurveRecorder(results / "curve.jsonl")
    progress = Progress(env_steps=5000, eval_return=2.0, eval_count=1, processes={"evals-0": evals})
    rec.record(progress, elapsed=1.0)
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
