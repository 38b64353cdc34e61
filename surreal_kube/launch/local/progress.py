"""What the roles report about themselves, read from their status files.

Roles write `status/<process>.json` atomically every few seconds (see the runtime's status module
for the fields). The backend never talks to the roles' sockets: these files are enough for the
status view, the budget and the results, and they survive a restart of the supervisor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surreal_kube.launch.local.folder import read_json


@dataclass
class Progress:
    """One snapshot of the whole experiment."""

    env_steps: int = 0
    """Env steps taken by all agents (train agents only, evals excluded)."""
    env_steps_per_agent: dict[int, int] = field(default_factory=dict)
    learner_iteration: int = 0
    param_versions: dict[str, int] = field(default_factory=dict)
    """Parameter version each agent / eval process holds."""
    eval_return: float | None = None
    """Latest evaluation return (mean over the evals' latest runs)."""
    eval_count: int = 0
    """Total evaluations finished, over all evals."""
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    time: float = 0.0


def read_progress(status_dir: Path) -> Progress:
    """Aggregate every status file under `status_dir`."""
    prog = Progress(time=time.time())
    returns: list[float] = []
    for path in sorted(status_dir.glob("*.json")):
        data = read_json(path)
        if not isinstance(data, dict):
            continue
        name = path.stem
        prog.processes[name] = data
        role = data.get("role", "")
        if role == "agents":
            per_agent = data.get("env_steps_per_agent") or {}
            for agent_id, steps in per_agent.items():
                prog.env_steps_per_agent[int(agent_id)] = int(steps)
            if "param_version" in data:
                prog.param_versions[name] = int(data["param_version"])
        elif role == "learner":
            prog.learner_iteration = int(data.get("iteration", 0))
        elif role == "eval":
            if "param_version" in data:
                prog.param_versions[name] = int(data["param_version"])
            if data.get("last_return") is not None:
                returns.append(float(data["last_return"]))
            prog.eval_count += int(data.get("evaluations", 0))
    prog.env_steps = sum(prog.env_steps_per_agent.values())
    if returns:
        prog.eval_return = sum(returns) / len(returns)
    return prog
