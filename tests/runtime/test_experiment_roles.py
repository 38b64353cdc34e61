"""A whole experiment as role processes: agents learn through replay, the learner resumes."""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

from surreal_kube.runtime.status import read_status

pytestmark = pytest.mark.slow

SPEC = {
    "env": {"id": "gym:CartPole-v1"},
    "agents": {"count": 2, "batch": 2, "fetchInterval": 50},
    "evals": {"count": 1, "intervalSeconds": 2},
    "replay": {"startSampling": 16},
    "algorithm": {
        "batchSize": 16,
        "epochsPolicy": 2,
        "epochsBaseline": 2,
        "horizon": 10,
        "stride": 10,
    },
    "session": {"checkpoint": {"period": 5, "minIntervalSeconds": 0}},
}


def _status(run, process: str) -> dict:
    return read_status(run.dir / "status" / f"{process}.json") or {}


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_experiment_runs_and_a_restarted_learner_resumes(local_run):
    run = local_run(SPEC)
    for proc in run.topology.processes:
        if proc.role != "tensorboard":
            run.start(proc.name)

    _wait(lambda: _status(run, "learner").get("iteration", 0) >= 10, 150, "learner iterations")
    _wait(lambda: _status(run, "agents-0").get("param_version", -1) >= 1, 60, "agents to fetch")
    _wait(lambda: _status(run, "evals-0").get("evaluations", 0) >= 1, 60, "an evaluation")
    agents = _status(run, "agents-0")
    assert agents["state"] == "running" and agents["extra"]["items_dropped"] == 0
    # agents and evals yield the CPU to the learner (runtime.main.NICENESS)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    niceness = {n: os.getpriority(os.PRIO_PROCESS, run.procs[n].pid) - ours for n in run.procs}
    assert niceness["agents-0"] == 10 and niceness["evals-0"] == 5, niceness
    assert niceness["learner"] == niceness["replay-shard-0"] == 0, niceness
    assert set(agents["env_steps_per_agent"]) == {"0", "1"}
    assert agents["env_steps"] == sum(agents["env_steps_per_agent"].values()) > 0

    code, _ = run.terminate("learner")
    assert code == 0  # exited on SIGTERM within the harness's wait
    stopped = _status(run, "learner")
    assert stopped["state"] == "stopped"
    last = stopped["iteration"]
    assert (run.dir / "checkpoints" / f"learner.{last}.ckpt").exists()

    run.start("learner")
    log = run.wait_log("learner", f"resumed from learner.{last}.ckpt at iteration {last}", 120)
    assert "Traceback" not in log
    _wait(lambda: _status(run, "learner").get("iteration", 0) > last, 60, "learning after resume")
    assert _status(run, "learner")["restarts"] == 1

    for proc in run.topology.processes:
        if proc.name in run.procs:
            code, _ = run.terminate(proc.name)
            assert code == 0, (proc.name, code)
    assert _status(run, "agents-0")["state"] == "stopped"
    assert sorted(p.stem for p in (run.dir / "logs").glob("*.log")) == sorted(
        p.name
        for p in run.topology.processes
        if p.role not in ("tensorplex", "loggerplex", "tensorboard")
    )


def test_tensorboard_role_serves_http_and_stops_on_sigterm(local_run):
    run = local_run()
    run.start("tensorboard")
    url = run.addr("tensorboard")
    end = time.monotonic() + 60
    body = b""
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body = response.read()
                break
        except OSError:
            time.sleep(0.5)
    assert b"TensorBoard" in body or b"tensorboard" in body
    code, _ = run.terminate("tensorboard")
    assert code == 0  # exited on SIGTERM within the harness's wait
