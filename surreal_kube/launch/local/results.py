"""Results a person can look at: the learning curve and a summary, written when a run ends.

The supervisor records the curve as it goes (`results/curve.jsonl`, one point per evaluation,
appended, so a resumed run continues the same curve); at the end it is drawn as
`results/learning_curve.png` (eval return against env steps and against wall time) and summarized
in `results/summary.json`.
"""

from __future__ import annotations

import json
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
        point = {
            "env_steps": progress.env_steps,
            "wall_time": round(elapsed, 3),
            "eval_return": progress.eval_return,
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
        "evaluations": len(returns),
        "restarts": restarts,
        "total_restarts": sum(restarts.values()),
    }
    write_json_atomic(results_dir / "summary.json", summary)
    picture = results_dir / "learning_curve.png"
    _plot(points, picture, title=f"{name}: {phase.lower()} ({reason})")
    return picture


def _plot(points: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, (ax_steps, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    steps = [p["env_steps"] for p in points]
    wall = [p["wall_time"] / 60.0 for p in points]
    rets = [p["eval_return"] for p in points]
    for ax, xs, label in ((ax_steps, steps, "env steps"), (ax_time, wall, "wall time (minutes)")):
        if points:
            ax.plot(xs, rets, marker="o", markersize=3, linewidth=1.5)
        else:
            ax.text(
                0.5, 0.5, "no evaluation finished", ha="center", va="center", transform=ax.transAxes
            )
        ax.set_xlabel(label)
        if ax is ax_steps:
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("eval return")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
