"""Results a person can look at: the learning curve and a summary, one format for every backend.

Both ends of a run write the same three files under `<experiment>/results/`, through this module:
the local supervisor (launch/local/results.py, from the roles' progress files) and, on a cluster,
tensorplex (runtime/conductor.py, from the metrics it receives), which also copies them into the
ConfigMap `<exp>-results` so that `surreal-kube results` can fetch them after the pods are gone.

- `curve.jsonl`: one point per evaluation, appended (a resumed run continues the same curve):
  `env_steps` (the global env steps at which the evaluated parameters were published, the step
  TensorBoard shows the score at), `wall_time` (seconds since the experiment started),
  `eval_return` (mean over the evaluation's episodes), `eval_std`, `episodes`, `param_version`
  (the parameters evaluated), `learner_iteration`, `evaluations`, `time`.
- `learning_curve.png`: mean eval return with a ±1 std band over the episodes, against global
  env steps and against wall time.
- `summary.json`: phase and reason, env steps, wall time, final / best / recent-mean return, and
  what says whether the numbers can be trusted (episodes per evaluation, policy lag, replay).

This module sits below both backends (session/), so it imports nothing of theirs; matplotlib is
imported only when a picture is drawn.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CURVE = "curve.jsonl"
SUMMARY = "summary.json"
PICTURE = "learning_curve.png"
FILES = (SUMMARY, PICTURE, CURVE)
"""Every results file, in the order `results` fetches and lists them."""


def std(values: Iterable[float]) -> float | None:
    """Population standard deviation (None for no values): the spread of one evaluation."""
    vals = list(values)
    if not vals:
        return None
    mean = sum(vals) / len(vals)
    return math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))


def parse_curve(text: str) -> list[dict[str, Any]]:
    """Points of a curve file's text in the run's time order; a line cut by a crash (or not a
    point) is skipped.

    The file's order is the order evaluations finished: a local evaluator plays its newest
    snapshot first while the CPUs are taken and the older ones later (runtime/eval.py), so the
    points are sorted by the time of their snapshot (a stable sort: ties keep the file's order).
    """
    points = []
    for line in text.splitlines():
        try:
            point = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(point, dict) and isinstance(point.get("eval_return"), int | float):
            points.append(point)
    points.sort(key=_wall_time)
    return points


def _wall_time(point: Mapping[str, Any]) -> float:
    value = point.get("wall_time")
    return float(value) if isinstance(value, int | float) else 0.0


def load_curve(path: Path) -> list[dict[str, Any]]:
    """Points recorded so far (an empty list when none)."""
    if not path.is_file():
        return []
    return parse_curve(path.read_text(errors="replace"))


def curve_text(points: Iterable[Mapping[str, Any]]) -> str:
    """The curve file's text for `points` (one JSON object per line)."""
    return "".join(json.dumps(dict(p)) + "\n" for p in points)


def append_point(path: Path, point: Mapping[str, Any]) -> None:
    """Append one point to a curve file (creating its folder).

    All or nothing: a write the disk refuses half-way is cut off again before the OSError is
    raised, so the caller's next try does not follow a torn line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(dict(point)) + "\n").encode()
    with path.open("ab", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        done = 0
        try:
            while done < len(line):  # a raw write may be short before it fails
                done += f.write(line[done:]) or 0
        except OSError:
            f.truncate(size)
            raise


def summarize(
    points: list[dict[str, Any]],
    *,
    name: str,
    phase: str,
    reason: str,
    env_steps: int,
    elapsed: float,
    learner_iteration: int,
    restarts: Mapping[str, int] | None,
    health: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary document. `restarts`: per process, or None where the writer cannot know
    them (tensorplex on a cluster: pod restarts are in `status`); `health`: policy lag, replay
    and agents' waiting, as far as the writer knows them."""
    returns = [float(p["eval_return"]) for p in points]
    last = points[-1] if points else {}
    return {
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
        "restarts": None if restarts is None else dict(restarts),
        "total_restarts": None if restarts is None else sum(restarts.values()),
        "global_env_steps": health.get("global_env_steps"),
        "policy_lag": health.get("policy_lag"),
        "replay": health.get("replay"),
        "agents_replay_wait_seconds": health.get("agents_replay_wait_seconds"),
    }


def summary_text(summary: Mapping[str, Any]) -> str:
    """summary.json's text (indented, keys sorted: the format the local backend always wrote)."""
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so that a reader never sees half of it (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def picture(points: list[dict[str, Any]], title: str) -> bytes:
    """learning_curve.png's bytes: mean ± std against global env steps and wall time."""
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def title(name: str, phase: str, reason: str) -> str:
    """The picture's title: which experiment, how it ended and why."""
    return f"{name}: {phase.lower()} ({reason})"


def write_files(
    results_dir: Path, summary: Mapping[str, Any], points: list[dict[str, Any]]
) -> dict[str, bytes]:
    """Write summary.json and learning_curve.png (the curve file is appended as it goes);
    returns every results file's bytes, the curve's included, for whoever copies them on."""
    files = {
        SUMMARY: summary_text(summary).encode(),
        PICTURE: picture(points, title(summary["experiment"], summary["phase"], summary["reason"])),
    }
    for name, data in files.items():
        write_atomic(results_dir / name, data)
    files[CURVE] = curve_text(points).encode()
    return files
