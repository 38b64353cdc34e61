"""A supervisor that dies leaves nothing running unseen (issue 15 item 11).

Real processes throughout: plain `sleep`s for what the backend sees and signals, and a whole
experiment whose `create --local` is killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surreal_kube.launch.local import backend
from surreal_kube.launch.local.folder import read_json, write_json_atomic
from surreal_kube.launch.local.orphans import is_role_of, lost_view, stop_leftovers
from surreal_kube.runtime.lifecycle import ORPHAN_GRACE
from tests.launch.local.test_local_experiment import listening, released
from tests.processes import kill_group, running

SK = [sys.executable, "-m", "surreal_kube.cli.main"]
SMALL = [
    "--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "2", "--num-evals", "1",
    "--set", "session.metrics.agentIntervalSeconds=1", "--set", "algorithm.batchSize=16",
]  # fmt: skip


def _sleeper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)


def _gone(pid: int) -> bool:
    return not backend.pid_alive(pid)


def test_only_this_experiments_leftovers_are_shown_and_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    (folder / "status").mkdir(parents=True)
    ours = _sleeper({**os.environ, "SURREAL_EXPERIMENT_DIR": str(folder)})
    other = _sleeper({**os.environ, "SURREAL_EXPERIMENT_DIR": str(tmp_path / "other")})
    try:
        state = {
            "phase": "Running",
            "supervisor_pid": 999_999_999,
            "processes": {
                "learner": {"pid": ours.pid, "state": "running"},
                "replay": {"pid": other.pid, "state": "running"},  # a reused pid: not ours
                "ps": {"pid": None, "state": "pending"},
            },
        }
        write_json_atomic(folder / "status" / "agents-0.json", {
            "role": "agents", "env_steps_per_agent": {"0": 42}})  # fmt: skip
        view = lost_view(folder, state)
        assert {n: p["state"] for n, p in view["processes"].items()} == {
            "learner": "orphaned",
            "replay": "gone",
            "ps": "gone",
        }
        assert view["env_steps"] == 42  # what the roles wrote, not the supervisor's stale copy
        assert "1 of its processes are still stopping" in view["reason"]
        assert "surreal-kube create exp --local --resume" in view["reason"]

        assert stop_leftovers(folder, state, grace=5) == ["learner"]
        ours.wait(timeout=10)
        assert other.poll() is None  # never signalled
    finally:
        for proc in (ours, other):
            kill_group(proc)


def test_a_role_is_recognised_the_moment_its_spawn_returns(tmp_path: Path) -> None:
    # CI (make test): `lost_view` called right after Popen saw the learner as gone. Popen returns
    # once the child's exec has closed its close-on-exec pipe, a moment before the kernel lays out
    # the new environment; /proc/PID/environ reads empty then (about 1 spawn in 20 here).
    folder = tmp_path / "exp"
    env = {**os.environ, "SURREAL_EXPERIMENT_DIR": str(folder)}
    missed = 0
    for _ in range(200):
        proc = _sleeper(env)
        try:
            missed += not is_role_of(proc.pid, folder)
        finally:
            kill_group(proc)
    assert missed == 0


@pytest.mark.slow
def test_killed_supervisor_leaves_no_role_running(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    folder = root / "exp-orphan"
    cmd = [*SK, "create", "exp-orphan", "--local", "--root", str(root), *SMALL]
    with running(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            deadline = time.time() + 240
            while time.time() < deadline:  # every role up: agents act with learned parameters
                agents = read_json(folder / "status" / "agents-0.json") or {}
                if agents.get("param_version", -1) >= 1:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError("the experiment never ran")
            state = read_json(folder / "state.json")
            pids = [p["pid"] for p in state["processes"].values()]
            assert pids and all(backend.pid_alive(p) for p in pids)

            os.kill(proc.pid, signal.SIGKILL)  # the supervisor: no chance to stop anything
            proc.wait()
            bound = ORPHAN_GRACE + 15
            deadline = time.time() + bound
            while time.time() < deadline and not all(_gone(p) for p in pids):
                time.sleep(0.2)
            left = [n for n, p in state["processes"].items() if not _gone(p["pid"])]
            assert not left, f"still running {bound:.0f}s after the supervisor died: {left}"
            # nothing listens on its endpoints; the folder of its sockets stays until delete
            assert not listening(state) and Path(state["sockets"]).is_dir()

            found = backend.find("exp-orphan", root)
            assert found.phase == "Lost"
            assert {p["state"] for p in found.state["processes"].values()} == {"gone"}
            assert found.state["env_steps"] > 0
            learner = read_json(folder / "status" / "learner.json")
            assert learner["state"] == "stopped"  # stopped cleanly, as on SIGTERM
            backend.delete("exp-orphan", root, keep_files=True)
            assert released(state)  # delete removed what the killed supervisor left
        finally:
            for info in (read_json(folder / "state.json") or {}).get("processes", {}).values():
                if info.get("pid") and backend.pid_alive(info["pid"]):
                    os.killpg(info["pid"], signal.SIGKILL)
