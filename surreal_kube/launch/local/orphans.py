"""A local experiment whose supervisor died: what is still running, and what it had reached.

A supervisor killed with SIGKILL (or by the OOM killer) writes no final phase. Its roles stop by
themselves within seconds (they watch their supervisor, see runtime.lifecycle), but until then,
and for whatever ignores that, nothing may run unseen: `status` shows each recorded process as
`orphaned` (still running) or `gone`, with the progress the roles last wrote rather than the
supervisor's stale copy, and `create --resume` / `--replace` and `delete` stop what is left
before anything new starts.

A recorded pid counts as one of this experiment's roles only while its environment names this
experiment's folder, so a pid reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from surreal_kube.launch.local.progress import read_progress

GONE, ORPHANED = "gone", "orphaned"


# A process in the middle of execve has already closed its close-on-exec descriptors (so the
# parent's Popen has returned) but has not yet laid out its new environment: /proc shows it empty
# for a moment. Every role has an environment, so an empty one is read again until this passes.
EXEC_SETTLE_SECONDS = 2.0


def _environ(pid: int) -> list[bytes] | None:
    """The environment of a live, non-zombie `pid`; None if gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ")[-1][:1] == "Z":
                return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def is_role_of(pid: int | None, folder: Path) -> bool:
    """True while `pid` is alive and runs a role of the experiment in `folder`."""
    if not pid:
        return False
    deadline = time.monotonic() + EXEC_SETTLE_SECONDS
    environ = _environ(pid)
    while environ == [b""] and time.monotonic() < deadline:  # an exec in progress
        time.sleep(0.005)
        environ = _environ(pid)
    return environ is not None and f"SURREAL_EXPERIMENT_DIR={folder}".encode() in environ


def leftover_pids(folder: Path, state: dict[str, Any]) -> dict[str, int]:
    """Processes of the state file still running as this experiment's roles, by name."""
    found = {}
    for name, info in (state.get("processes") or {}).items():
        pid = info.get("pid") if isinstance(info, dict) else None
        if pid is not None and is_role_of(pid, folder):
            found[name] = int(pid)
    return found


def lost_view(folder: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The state of an experiment whose supervisor died, as it stands now."""
    view = dict(state)
    alive = leftover_pids(folder, state)
    processes = {}
    for name, info in (state.get("processes") or {}).items():
        entry = dict(info)
        entry["state"] = ORPHANED if name in alive else GONE
        processes[name] = entry
    view["processes"] = processes
    progress = read_progress(folder / "status")
    view["env_steps"] = progress.env_steps
    view["learner_iteration"] = progress.learner_iteration
    view["eval_return"] = progress.eval_return
    pid = state.get("supervisor_pid")
    running = f"; {len(alive)} of its processes are still stopping" if alive else ""
    view["reason"] = (
        f"the supervisor (pid {pid}) died without stopping the experiment{running}; "
        f"`surreal-kube create {folder.name} --local --resume` continues it"
    )
    return view


def stop_leftovers(folder: Path, state: dict[str, Any], grace: float = 20.0) -> list[str]:
    """SIGTERM what is left of a dead supervisor's roles, SIGKILL it after `grace` s."""
    alive = leftover_pids(folder, state)
    for pid in alive.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline and any(is_role_of(p, folder) for p in alive.values()):
        time.sleep(0.1)
    for pid in alive.values():
        if is_role_of(pid, folder):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    return sorted(alive)
