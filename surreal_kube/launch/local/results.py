"""Results a person can look at: the learning curve and a summary, written when a run ends.

The supervisor records the curve as it goes (`results/curve.jsonl`, one point per evaluation,
appended, so a resumed run continues the same curve); at the end it is drawn as
`results/learning_curve.png` (mean eval return with a ±1 std band over the evaluation's episodes,
against global env steps and against wall time) and summarized in `results/summary.json`.

The x axis of a point is the global env steps at which the evaluated parameters were published
(what the evaluator reports), the same step TensorBoard shows the score at; each point also names
the parameter version evaluated. The summary adds what says whether the numbers can be trusted:
episodes per evaluation, policy lag (mean, p95, the bound), replay's inserted / sampled /
overwritten / stale items and the achieved samples per insert against its target, and how long
agents waited for the rate limiter, from the learner's and agents' progress files.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from surreal_kube.launch.local.folder import write_json_atomic
from surreal_kube.launch.local.progress import Progress


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
        self.last_eval_count = progress.eval_count
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
            "eval_std": _std(returns),
            "episodes": len(returns),
            "param_version": min(versions) if versions else None,
            "learner_iteration": progress.learner_iteration,
            "evaluations": progress.eval_count,
            "time": time.time(),
        }
        self.points.append(point)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(point) + "\n")


def load_curve(path: Path) -> list[dict[str, Any]]:
    """Points recorded so far (an empty list when none)."""
    if not path.is_file():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            points.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash
    return points


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
    points = load_curve(results_dir / "curve.jsonl")
    returns = [p["eval_return"] for p in points]
    last = points[-1] if points else {}
    summary = {
        "experiment": name,
        "phase": phase,
        "reason": reason,
        "env_steps": env_steps,
        "wall_time_seconds": round(elapsed, 1),
        "env_steps_per_second": round(env_steps / elapsed, 1) if elapsed > 0 else 0.0,
        "learner_iterations": learner_iteration,
        "final_return": returns[-1] if returns else None,
        "best_return": max(returns) if returns else None,
        # single evaluations are noisy: the mean of the last ten says more than the last one
        "recent_mean_return": sum(returns[-10:]) / len(returns[-10:]) if returns else None,
        "final_return_std": last.get("eval_std"),
        "final_param_version": last.get("param_version"),
        "episodes_per_evaluation": last.get("episodes"),
        "evaluations": len(returns),
        "restarts": restarts,
        "total_restarts": sum(restarts.values()),
        **learning_health(results_dir.parent / "status"),
    }
    write_json_atomic(results_dir / "summary.json", summary)
    picture = results_dir / "learning_curve.png"
    _plot(points, picture, title=f"{name}: {phase.lower()} ({reason})")
    return picture


def _std(values: list[float]) -> float | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


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


def _plot(points: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, (ax_steps, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    steps = [p["env_steps"] for p in points]
    wall = [p["wall_time"] / 60.0 for p in points]
    rets = [p["eval_return"] for p in points]
    stds = [p.get("eval_std") or 0.0 for p in points]
    low = [r - s for r, s in zip(rets, stds, strict=True)]
    high = [r + s for r, s in zip(rets, stds, strict=True)]
    for ax, xs, label in (
        (ax_steps, steps, "global env steps"),
        (ax_time, wall, "wall time (minutes)"),
    ):
        if points:
            ax.plot(xs, rets, marker="o", markersize=3, linewidth=1.5, label="mean")
            ax.fill_between(xs, low, high, alpha=0.25, linewidth=0, label="± 1 std (episodes)")
            ax.legend(loc="lower right", fontsize="small")
        else:
            ax.text(
                0.5, 0.5, "no evaluation finished", ha="center", va="center", transform=ax.transAxes
            )
        ax.set_xlabel(label)
        if ax is ax_steps:
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("eval return (mean ± std)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
