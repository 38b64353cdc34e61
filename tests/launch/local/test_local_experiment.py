"""Whole local experiments with the real roles: real processes, ZeroMQ on Unix sockets, gymnasium.

One experiment carries the fault tests in sequence (agent, replay and learner killed with SIGKILL)
and then runs to its budget; a second pair runs side by side. These take minutes on two cores, so
they are marked slow.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.local.backend import pid_alive
from surreal_kube.launch.local.folder import read_json
from surreal_kube.launch.local.ports import port_is_free
from tests.processes import running, stop

pytestmark = pytest.mark.slow

SK = [sys.executable, "-m", "surreal_kube.cli.main"]
SMALL = [
    "--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "2", "--num-evals", "1",
    "--set", "session.checkpoint.period=5", "--set", "session.checkpoint.minIntervalSeconds=0",
    "--set", "evals.intervalSeconds=3", "--set", "session.metrics.agentIntervalSeconds=1",
    "--set", "session.metrics.learnerIntervalSeconds=1", "--set", "algorithm.batchSize=16",
]  # fmt: skip


def sk(*args: str, root: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SK, *args, "--root", str(root)], capture_output=True, text=True, timeout=timeout
    )


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def status_of(folder: Path, process: str) -> dict[str, Any]:
    return read_json(folder / "status" / f"{process}.json") or {}


def state_of(folder: Path) -> dict[str, Any]:
    return read_json(folder / "state.json") or {}


def listening(state: dict[str, Any]) -> list[str]:
    """The endpoints of a run's state that something still listens on."""
    busy = [name for name, p in state["ports"].items() if not port_is_free(int(p))]
    for name, address in state["addresses"].items():
        if address.startswith("ipc://"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(address.removeprefix("ipc://"))
                except (FileNotFoundError, ConnectionRefusedError):
                    continue
                busy.append(name)
    return busy


def released(state: dict[str, Any]) -> bool:
    """Whether a stopped run let go of its endpoints: nothing listens on them and the folder
    of its Unix sockets is gone (launch/local/sockets.py)."""
    return not listening(state) and not Path(state["sockets"]).exists()


def experiment_pids(state: dict[str, Any]) -> list[int]:
    return [p["pid"] for p in state.get("processes", {}).values() if p.get("pid")]


def tensorboard_tags(logdir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    tags: set[str] = set()
    for run, kinds in mux.Runs().items():
        tags.update(f"{run}/{t}" if run != "." else t for t in kinds.get("scalars", []))
    return tags


def test_ppo_experiment_survives_faults_and_runs_to_budget(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    res = sk("create", "exp-faults", "--local", "--detach", *SMALL, root=root)
    assert res.returncode == 0, res.stderr
    # no budget: said at the start, not left to be found out
    assert (
        "no budget: runs until `surreal-kube delete exp-faults` (set one with "
        "--max-env-steps N or --max-time SECONDS)"
    ) in res.stderr
    folder = Path(res.stdout.strip())
    assert folder == (root / "exp-faults").resolve()
    for sub in ("config.yml", "logs", "tensorboard", "checkpoints", "videos", "state.json"):
        assert (folder / sub).exists(), sub
    try:
        # parameters flow: agents act with published parameters, learner iterates
        wait_for(
            "agents holding published parameters",
            lambda: all(
                status_of(folder, f"agents-{i}").get("param_version", -1) >= 1 for i in (0, 1)
            ),
        )
        v0 = status_of(folder, "agents-0")["param_version"]
        wait_for(
            "a newer parameter version",
            lambda: status_of(folder, "agents-0").get("param_version", -1) > v0,
        )

        # SIGKILL an agent: restarted, and experience from its id resumes
        state = state_of(folder)
        agent_pid = state["processes"]["agents-1"]["pid"]
        steps_before = status_of(folder, "agents-1")["env_steps_per_agent"]["1"]
        os.killpg(agent_pid, signal.SIGKILL)
        wait_for(
            "agents-1 restarted",
            lambda: (
                state_of(folder)["processes"]["agents-1"]["restarts"] == 1
                and state_of(folder)["processes"]["agents-1"]["pid"] != agent_pid
            ),
        )
        wait_for(
            "agent 1 stepping again",
            lambda: (
                status_of(folder, "agents-1").get("env_steps_per_agent", {}).get("1", 0)
                > steps_before + 200
            ),
            timeout=90,
        )

        # SIGKILL the replay: restarted, agents reconnect, the learner keeps learning
        replay_pid = state_of(folder)["processes"]["replay"]["pid"]
        os.killpg(replay_pid, signal.SIGKILL)
        wait_for(
            "replay restarted", lambda: state_of(folder)["processes"]["replay"]["restarts"] == 1
        )
        it = status_of(folder, "learner").get("iteration", 0)
        wait_for(
            "learner iterating after replay restart",
            lambda: status_of(folder, "learner").get("iteration", 0) >= it + 3,
            timeout=120,
        )

        # SIGKILL the learner: restarted from its newest checkpoint, global step preserved
        # learner.<iteration>.ckpt: the resumable ones (policy.<version>.ckpt are the best policies)
        wait_for("a checkpoint", lambda: list((folder / "checkpoints").glob("learner.*.ckpt")))
        ckpt_steps = max(
            int(p.name.split(".")[-2]) for p in (folder / "checkpoints").glob("learner.*.ckpt")
        )
        learner_pid = state_of(folder)["processes"]["learner"]["pid"]
        os.killpg(learner_pid, signal.SIGKILL)
        wait_for(
            "learner restarted", lambda: state_of(folder)["processes"]["learner"]["restarts"] == 1
        )

        # the restarted learner's log says what it restored (its status file may still carry the
        # killed learner's last report, which can be older than the newest checkpoint)
        def resumed_at() -> int | None:
            found = re.findall(
                r"resumed from learner\.\d+\.ckpt at iteration (\d+)",
                (folder / "logs" / "learner.log").read_text(),
            )
            return int(found[-1]) if found else None

        resumed = wait_for("learner resumed", resumed_at)
        assert resumed >= ckpt_steps, (resumed, ckpt_steps)

        # a detached experiment stops cleanly on delete (the budget is tested side by side below)
    finally:
        sk("delete", "exp-faults", "--keep-files", root=root)

    state = state_of(folder)
    assert state["phase"] == "Stopped"
    summary = json.loads((folder / "results" / "summary.json").read_text())
    assert summary["restarts"]["agents-1"] >= 1 and summary["restarts"]["replay"] >= 1
    assert summary["restarts"]["learner"] >= 1
    time.sleep(0.5)
    assert not any(pid_alive(p) for p in experiment_pids(state))
    assert released(state)


def check_finished_experiment(folder: Path, budget: int) -> None:
    """What a run that reached its budget must have left."""
    state = state_of(folder)
    assert state["phase"] == "Succeeded", state.get("reason")
    assert state["reason"] == f"reached {budget} env steps"
    assert state["env_steps"] == budget  # agents take their shares of it, no more
    # the learner consumed experience from both agents, whose parameter versions increased
    agents = [status_of(folder, f"agents-{i}") for i in (0, 1)]
    assert all(a["env_steps"] > 500 for a in agents)
    assert all(a["param_version"] >= 1 for a in agents)
    assert status_of(folder, "learner")["iteration"] >= 2
    # TensorBoard scalars for learner, agents, eval and replay
    tags = tensorboard_tags(folder / "tensorboard")
    for group in ("learner", "agent", "eval", "replay"):
        assert any(t.startswith(group) or f"/{group}" in t for t in tags), (group, sorted(tags))
    assert list((folder / "checkpoints").glob("*.ckpt"))
    summary = json.loads((folder / "results" / "summary.json").read_text())
    assert summary["phase"] == "Succeeded" and summary["env_steps"] == budget
    assert (folder / "results" / "learning_curve.png").stat().st_size > 5000
    # nothing left behind
    assert not any(pid_alive(p) for p in experiment_pids(state))
    assert released(state)


def test_two_experiments_side_by_side_and_bad_input(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    names = ("exp-left", "exp-right")
    for name in names:
        res = sk(
            "create", name, "--local", "--detach", *SMALL, "--max-env-steps", "8000", root=root
        )
        assert res.returncode == 0, res.stderr
        assert (
            "budget: 8,000 env steps, whichever comes first; then a final evaluation" in res.stderr
        )
    try:
        # a name in use is refused, and starts nothing new
        res = sk("create", "exp-left", "--local", "--detach", *SMALL, root=root)
        assert res.returncode == 1
        assert "is already running" in res.stderr
        states = [state_of(root / n) for n in names]
        assert not set(states[0]["ports"].values()) & set(states[1]["ports"].values())
        assert states[0]["sockets"] != states[1]["sockets"]
        for name in names:
            wait_for(
                f"{name} to finish",
                lambda n=name: state_of(root / n).get("phase") == "Succeeded",
                timeout=400,
            )
        for name in names:
            check_finished_experiment(root / name, 8000)
        listing = sk("list", "-o", "json", root=root)
        rows = {r["name"]: r for r in json.loads(listing.stdout)}
        assert {rows[n]["phase"] for n in names} == {"Succeeded"}
        # a finished experiment's name is still taken unless --resume / --replace
        res = sk("create", "exp-left", "--local", "--detach", *SMALL, root=root)
        assert res.returncode == 2 and "already in use" in res.stderr
        # resume continues from the newest checkpoint with the global step preserved
        before = status_of(root / "exp-left", "learner")
        taken = state_of(root / "exp-left")["env_steps"]
        resume = ("create", "exp-left", "--local", "--detach", "--resume", "--max-env-steps")
        res = sk(*resume, str(taken), root=root)
        assert res.returncode == 2
        assert f"already took {taken} env steps, at or over --max-env-steps {taken}" in res.stderr
        res = sk(*resume, str(taken + 6000), root=root)
        assert res.returncode == 0, res.stderr
        resumed = wait_for(
            "resumed learner",
            lambda: (lambda s: s if s.get("pid") not in (None, before["pid"]) else None)(
                status_of(root / "exp-left", "learner")
            ),
        )
        assert resumed["iteration"] >= before["iteration"] > 0
        wait_for(
            "resumed run to finish",
            lambda: state_of(root / "exp-left").get("phase") == "Succeeded",
            timeout=400,
        )
    finally:
        for name in names:
            sk("delete", name, "--yes", root=root)
    assert not (root / "exp-left").exists() and not (root / "exp-right").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["create", "Bad_Name", "--local"], 2, "invalid experiment name 'Bad_Name'"),
        (["create", "exp-bad", "--local", "--env", "gym:NoSuchEnv-v9"], 2, "NoSuchEnv-v9"),
        (
            ["create", "exp-bad", "--local", "--set", "agents.count=0"],
            2,
            "spec.agents.count: must be >= 1, got 0",
        ),
        (
            ["create", "exp-bad", "--local", "--resume"],
            2,
            "--resume: no experiment named 'exp-bad'",
        ),
    ],
)
def test_bad_input_starts_nothing(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    root = tmp_path / "exps"
    res = sk(*args, root=root)
    assert res.returncode == code, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert not list(root.glob("*/config.yml")) if root.exists() else True


def test_a_run_shorter_than_a_report_period_still_has_learner_scalars(tmp_path: Path) -> None:
    """The learner reported its scalars only when a report period had passed since the last:
    a CartPole run of 8,000 env steps was over within its first second, and its TensorBoard had
    no learner scalar at all (seen as a failure of the test above). The last period is flushed
    when the learner stops."""
    root = tmp_path / "exps"
    res = sk("create", "exp-short", "--local", "--detach", *SMALL, "--max-env-steps", "4000",
             "--set", "session.metrics.learnerIntervalSeconds=3600", root=root)  # fmt: skip
    assert res.returncode == 0, res.stderr
    wait_for("exp-short to finish",
             lambda: state_of(root / "exp-short").get("phase") == "Succeeded", timeout=400)  # fmt: skip
    assert status_of(root / "exp-short", "learner")["iteration"] >= 1
    tags = tensorboard_tags(root / "exp-short" / "tensorboard")
    assert any(t.startswith("learner") for t in tags), sorted(tags)
    assert any("losses/" in t for t in tags), sorted(tags)


def test_foreground_view_and_ctrl_c_stop_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    # The child gets SIGINT at its default, as from a terminal, however this test run started.
    with running(
        [
            *SK,
            "create",
            "exp-fg",
            "--local",
            "--root",
            str(root),
            *SMALL,
            "--max-env-steps",
            "50000000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        folder = root / "exp-fg"
        wait_for(
            "agents acting with published parameters",
            lambda: status_of(folder, "agents-0").get("param_version", -1) >= 1,
        )
        out, err = stop(proc, signal.SIGINT, timeout=60)  # what Ctrl-C sends
    assert proc.returncode == 0, err[-2000:]
    assert out.strip() == str((folder / "results" / "learning_curve.png").resolve())
    assert "exp-fg: stopped (stopped by request)" in err
    for column in ("process", "restarts", "learner iter", "env steps"):
        assert column in err  # the live view was drawn
    state = state_of(folder)
    assert state["phase"] == "Stopped"
    assert not any(pid_alive(p) for p in experiment_pids(state))
    assert released(state)
