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

from surreal_kube.launch.local.progress import Progress
from surreal_kube.session import results as shared
from surreal_kube.session.results import load_curve

__all__ = ["CurveRecorder", "learning_health", "load_curve", "write_results"]


class CurveRecorder:
    """Appends (env steps, wall time, eval return) whenever a new evaluation finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.points = load_curve(path)
        # a resumed run continues the curve: the evaluations already on it are not added again
        self.last_eval_count = self.points[-1].get("evaluations", -1) if self.points else -1

    def record(self, progress: Progress, elapsed: float) -> None:
        """Add a point when an evaluation finished since the last call."""
        if progress.eval_return is None or progress.eval_count == self.last_eval_count:
            return
        returns, versions, steps = [], [], []
        for data in progress.processes.values():
            if data.get("role") != "eval":
                continue
            episodes = data.get("last_returns")
            if isinstance(episodes, list):
                returns += [float(r) for r in episodes if isinstance(r, (int, float))]
            if isinstance(data.get("param_version"), int):
                versions.append(data["param_version"])
            if isinstance(data.get("param_env_steps"), int) and data["param_env_steps"] >= 0:
                steps.append(data["param_env_steps"])
        point = {
            # the steps the evaluated parameters were published at (as TensorBoard shows them)
            "env_steps": min(steps) if steps else progress.env_steps,
            "wall_time": round(elapsed, 3),
            "eval_return": progress.eval_return,
            "eval_std": shared.std(returns),
            "episodes": len(returns),
            "param_version": min(versions) if versions else None,
            "learner_iteration": progress.learner_iteration,
            "evaluations": progress.eval_count,
            "time": time.time(),
        }
        shared.append_point(self.path, point)  # first: a full disk raises, the next call retries
        self.points.append(point)
        self.last_eval_count = progress.eval_count


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
