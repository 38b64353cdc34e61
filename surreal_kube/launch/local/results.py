"""The local backend's results: the curve recorded from the roles' progress files, and the
summary and picture written when a run ends.

The files and their format are session/results.py's (one implementation for local and cluster
runs); what is local here is where the figures come from. The supervisor records the curve as it
goes (`results/curve.jsonl`, one point per evaluation, appended, so a resumed run continues the
same curve); at the end `write_results` draws `results/learning_curve.png` and writes
`results/summary.json`, adding what says whether the numbers can be trusted from the learner's
and agents' progress files: policy lag (mean, p95, the bound), replay's inserted / sampled /
overwritten / stale items and the achieved samples per insert against its target, and how long
agents waited for the rate limiter.

The x axis of a point is the global env steps at which the evaluated parameters were published
(what the evaluator reports), the same step TensorBoard shows the score at; each point also names
the parameter version evaluated.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from surreal_kube.experiment.progress import new_evaluations
from surreal_kube.launch.local.progress import Progress
from surreal_kube.session import results as shared
from surreal_kube.session.results import load_curve

__all__ = ["CurveRecorder", "learning_health", "load_curve", "write_results"]


class CurveRecorder:
    """Appends one point per evaluation, each where its snapshot was taken.

    Evaluators list their latest evaluations in their progress files (`recent_evaluations`,
    runtime/eval.py): an evaluator that played a backlog of snapshots finishes several between two
    reads, and each is a point of its own, with the env steps of its parameters and the run's
    time when its snapshot was taken (not when it was played).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        # a resumed run continues the curve: the evaluations already on it are not added again
        self.seen: dict[str, int] = {}
        for point in load_curve(path):
            name, number = point.get("process"), point.get("evaluation")
            if isinstance(name, str) and isinstance(number, int):
                self.seen[name] = max(self.seen.get(name, -1), number)

    def record(self, progress: Progress, elapsed: float, now: float | None = None) -> None:
        """Add a point for each evaluation finished since the last call.

        elapsed: the run's seconds at `now` (wall clock); a point's `wall_time` is its
        snapshot's, so a snapshot played late still sits where it was taken."""
        now = time.time() if now is None else now
        new = [
            (_number(rec.get("taken_at"), now), name, rec)
            for name, data in sorted(progress.processes.items())
            if data.get("role") == "eval"
            for rec in new_evaluations(data, self.seen.get(name, -1))
        ]
        for taken_at, name, rec in sorted(new, key=lambda n: (n[0], n[1])):
            steps = rec.get("param_env_steps")
            point = {
                # the steps the evaluated parameters were published at (as TensorBoard shows them)
                "env_steps": steps if isinstance(steps, int) and steps >= 0 else progress.env_steps,
                "wall_time": round(max(0.0, elapsed - (now - taken_at)), 3),
                "eval_return": rec["return"],
                "eval_std": _number(rec.get("std"), 0.0),
                "episodes": int(_number(rec.get("episodes"), 0)),
                "param_version": rec.get("param_version"),
                "learner_iteration": progress.learner_iteration,
                "process": name,
                "evaluation": rec["evaluation"],
                "evaluations": progress.eval_count,
                "time": taken_at,
            }
            # first: a full disk raises, and the next call retries from this evaluation on
            shared.append_point(self.path, point)
            self.seen[name] = rec["evaluation"]


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


def write_results(
    results_dir: Path,
    *,
    name: str,
    phase: str,
    reason: str,
    env_steps: int,
    elapsed: float,
    restarts: dict[str, int],
    learner_iteration: int,
) -> Path:
    """Write `summary.json` and `learning_curve.png`; returns the picture's path."""
    points = load_curve(results_dir / shared.CURVE)
    summary = shared.summarize(
        points,
        name=name,
        phase=phase,
        reason=reason,
        env_steps=env_steps,
        elapsed=elapsed,
        learner_iteration=learner_iteration,
        restarts=restarts,
        health=learning_health(results_dir.parent / "status"),
    )
    shared.write_files(results_dir, summary, points)
    return results_dir / shared.PICTURE


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def learning_health(status_dir: Path) -> dict[str, Any]:
    """Policy lag, replay ratio and agents' waiting, from the roles' progress files."""
    extra = _read(status_dir / "learner.json").get("extra") or {}
    waited = 0.0
    for path in status_dir.glob("agents-*.json"):
        value = (_read(path).get("extra") or {}).get("replay_wait_seconds")
        if isinstance(value, (int, float)):
            waited += float(value)
    return {
        "global_env_steps": extra.get("global_env_steps"),
        "policy_lag": extra.get("policy_lag"),
        "replay": extra.get("replay"),
        "agents_replay_wait_seconds": round(waited, 1),
    }
