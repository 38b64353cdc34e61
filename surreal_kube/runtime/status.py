"""Progress files: what each role reports about itself, for `status`, results and supervision.

The learner, every agents process and every eval process write
`<SURREAL_EXPERIMENT_DIR>/status/<process>.json` every few seconds and when they stop. The file is
written to a temporary name and renamed (atomic on POSIX), so a reader never sees half a file.

Fields (schema 1; a field that does not apply to a role is absent, null or 0):

    schema               1
    experiment           experiment name
    process, role        e.g. "agents-0" / "agents", "learner" / "learner", "evals-0" / "eval"
    pid                  OS process id of the current run
    state                "starting" | "waiting" (for peers or data) | "running" | "done"
                         (agents: every agent took its share of session.maxEnvSteps; idle until
                         stopped) | "stopped" (after SIGTERM) | "failed"
    message              one line saying why, for waiting / failed states ("" otherwise)
    started_at           Unix time this run started
    updated_at           Unix time of this write
    restarts             how many times this process started before this run
    env_steps            environment steps taken by this process (agents, evals), cumulative
    env_steps_per_agent  agents: {"<agent id>": steps}, cumulative (the local backend sums these
                         for the max_env_steps budget)
    episodes             episodes finished (agents, evals), cumulative
    last_episode_return  agents: return of the newest finished episode (null before the first)
    iteration            learner: learner iterations, the global step (restored from checkpoints)
    param_version        learner: the iteration it last published; agents: the iteration of the
                         parameters they act with (-1: none yet, initial weights); evals: the
                         iteration of the parameters their newest evaluation scored
    param_env_steps      evals: global env steps at which those parameters were published
    last_return          evals: mean return of the newest evaluation run (null before the first)
    last_return_std      evals: standard deviation of its episodes' returns
    last_returns         evals: its episodes' returns (`evals.episodes` of them)
    evaluations          evals: evaluation runs finished, cumulative
    rates                throughput over the last period, e.g. {"env_steps_per_s": ..., ...}
    extra                role-specific details (dropped experience, fetch failures, queue sizes)

Restart safety: the cumulative counters are read back from the previous file on start and this
run's counts are added to them, so totals never go backwards when a process restarts.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA = 1
_CUMULATIVE = ("env_steps", "episodes", "evaluations")


def status_path(experiment_dir: Path, process: str) -> Path:
    """Where `process` writes its progress file."""
    return experiment_dir / "status" / f"{process}.json"


def read_status(path: Path) -> dict[str, Any] | None:
    """A progress file's content, or None if it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to `path` so that readers see the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class ProgressFile:
    """A role's progress file: set fields as they change, `maybe_write()` in the loop."""

    def __init__(
        self, experiment_dir: Path, experiment: str, process: str, role: str, *, period: float = 2.0
    ) -> None:
        self.path = status_path(experiment_dir, process)
        self.period = period
        previous = read_status(self.path) or {}
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "experiment": experiment,
            "process": process,
            "role": role,
            "pid": os.getpid(),
            "state": "starting",
            "message": "",
            "started_at": time.time(),
            "updated_at": time.time(),
            "restarts": int(previous["restarts"]) + 1 if _is_int(previous.get("restarts")) else 0,
            "rates": {},
            "extra": {},
        }
        self.base = {k: int(previous[k]) if _is_int(previous.get(k)) else 0 for k in _CUMULATIVE}
        """Counters of previous runs; `update` adds this run's counts to them."""
        per_agent = previous.get("env_steps_per_agent")
        self.base_per_agent: dict[str, int] = (
            {str(k): int(v) for k, v in (per_agent or {}).items() if _is_int(v)}
            if isinstance(per_agent, dict)
            else {}
        )
        for key in ("last_return", "last_episode_return", "param_version", "iteration"):
            if key in previous:  # keep the last known values visible until this run has its own
                self.data[key] = previous[key]
        self._last_write = 0.0
        self.write()

    def prior_steps(self, agent_id: int) -> int:
        """Env steps agent `agent_id` took in earlier runs of this process (restarts, resumes)."""
        return self.base_per_agent.get(str(agent_id), 0)

    def update(self, **fields: Any) -> None:
        """Set fields; cumulative ones are given as this run's counts (the base is added)."""
        for key, value in fields.items():
            if key in _CUMULATIVE:
                value = self.base[key] + int(value)
            elif key == "env_steps_per_agent":
                value = {
                    str(a): self.base_per_agent.get(str(a), 0) + int(n) for a, n in value.items()
                }
            self.data[key] = value

    def due(self) -> bool:
        """True once `period` seconds passed since the last write."""
        return time.monotonic() - self._last_write >= self.period

    def maybe_write(self) -> bool:
        """Write if `period` seconds passed since the last write."""
        if self.due():
            self.write()
            return True
        return False

    def write(self, state: str | None = None, message: str | None = None) -> None:
        """Write now (optionally setting the state)."""
        if state is not None:
            self.data["state"] = state
        if message is not None:
            self.data["message"] = message
        self.data["updated_at"] = time.time()
        try:
            write_atomic(self.path, self.data)
        except OSError as exc:  # a full disk must not kill the role
            log.warning("cannot write progress file %s: %s", self.path, exc)
        self._last_write = time.monotonic()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
