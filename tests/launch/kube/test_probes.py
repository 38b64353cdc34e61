"""The learner's startup and liveness probes as rendered, and their command run for real.

tests/runtime/test_heartbeat.py runs the same command against a real learner's heartbeat; here
the rendered command itself (with `python` and the pod's path swapped for this machine's) tells
a fresh heartbeat from a stale one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate

from surreal_kube.launch.kube.render.objects import (
    HEARTBEAT_ENV,
    HEARTBEAT_FLOOR_SECONDS,
    STARTUP_PROBE_SECONDS,
    heartbeat_max_age,
    render_experiment,
)
from surreal_kube.runtime import lifecycle
from tests.launch.kube.specs import IMAGES, experiment

K8S_VERSION = "1.37.0"


def _containers(objects: list[dict]) -> dict[str, dict]:
    return {
        c["name"]: c
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }


def _learner(extra: list[str] | None = None) -> dict:
    objects = render_experiment(experiment("one-agent", extra=extra), "rl", images=IMAGES)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    return _containers(objects)["learner"]


def test_the_learner_agents_and_evals_have_liveness_and_startup_probes() -> None:
    """Issue 27 item 2: before, only the learner had them; an agent stuck in an env's step sat
    Running for good while the run lost its experience."""
    objects = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    probed = {n for n, c in _containers(objects).items() if "livenessProbe" in c}
    started = {n for n, c in _containers(objects).items() if "startupProbe" in c}
    assert probed == started == {"learner", "agents", "evals"}
    containers = _containers(objects)
    for name in ("agents", "evals"):  # one template for every replica: the group's file
        c = containers[name]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env[HEARTBEAT_ENV] == f"/tmp/{name}.heartbeat"
        command = c["livenessProbe"]["exec"]["command"]
        assert command[4] == env[HEARTBEAT_ENV]
        assert command[-2:] == ["--max-age", str(HEARTBEAT_FLOOR_SECONDS)]
    big = experiment("one-agent", extra=["algorithm.batchSize=4096"])
    assert heartbeat_max_age(big, "agents") == HEARTBEAT_FLOOR_SECONDS  # no update to wait on


def test_the_probe_reads_the_heartbeat_the_learner_is_told_to_touch() -> None:
    learner = _learner()
    env = {e["name"]: e.get("value") for e in learner["env"]}
    assert HEARTBEAT_ENV == lifecycle.HEARTBEAT_ENV  # launch/ may not import runtime/
    path = env[HEARTBEAT_ENV]
    command = learner["livenessProbe"]["exec"]["command"]
    assert learner["startupProbe"]["exec"]["command"] == command
    assert command == [
        "python", "-m", "surreal_kube.runtime.lifecycle", "heartbeat", path,
        "--max-age", str(HEARTBEAT_FLOOR_SECONDS),
    ]  # fmt: skip
    # the file lives on the pod's writable emptyDir (the root filesystem is read-only)
    mounts = {m["mountPath"] for m in learner["volumeMounts"]}
    assert str(Path(path).parent) in mounts


def test_startup_allows_imports_and_a_restore_and_liveness_bounds_a_stuck_update() -> None:
    learner = _learner()
    startup, live = learner["startupProbe"], learner["livenessProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == STARTUP_PROBE_SECONDS
    assert live["timeoutSeconds"] > 1  # an interpreter starts slower than that on a busy node
    assert live["periodSeconds"] * live["failureThreshold"] <= HEARTBEAT_FLOOR_SECONDS


def test_the_bound_grows_with_the_slowest_update_the_spec_asks_for() -> None:
    assert heartbeat_max_age(experiment("one-agent")) == HEARTBEAT_FLOOR_SECONDS
    big = experiment("one-agent", extra=["algorithm.batchSize=4096"])
    # 4096 sub-trajectories x 25 steps x 20 epochs at 80 us, times a margin of 10
    assert heartbeat_max_age(big) == 1639
    command = _learner(["algorithm.batchSize=4096"])["livenessProbe"]["exec"]["command"]
    assert command[-2:] == ["--max-age", "1639"]


def _run_rendered(command: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    pod_path = command[4]
    local = [
        sys.executable if a == "python" else str(path) if a == pod_path else a for a in command
    ]
    return subprocess.run(local, capture_output=True, text=True, timeout=60)


def test_the_rendered_command_passes_a_fresh_heartbeat_and_fails_a_stale_one(tmp_path) -> None:
    command = _learner()["livenessProbe"]["exec"]["command"]
    beat = tmp_path / "learner.heartbeat"
    res = _run_rendered(command, beat)
    assert res.returncode == 1 and "no heartbeat" in res.stderr  # before the first beat
    beat.touch()
    res = _run_rendered(command, beat)
    assert res.returncode == 0, res.stderr
    old = time.time() - HEARTBEAT_FLOOR_SECONDS - 5
    os.utime(beat, (old, old))
    res = _run_rendered(command, beat)
    assert res.returncode == 1 and "the main loop is stuck" in res.stderr
