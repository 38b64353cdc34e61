"""The chart's `helm test` (surreal_kube/operator/smoke.py) against a real API server with the
CRD and no operator: this test plays the operator, writing the status the smoke waits for.

Whatever the end (Succeeded, Failed, a timeout, SIGTERM), the smoke's Experiment is gone when it
exits; an Experiment of the same name that is not a test's is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube
from surreal_kube.launch.kube.render.custom_resource import experiment_object
from surreal_kube.operator import smoke
from tests.operator.support import ROOT, SPEC_IMAGES, connect, ensure_crd, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAME = "sk-smoke"


@pytest.fixture
def kube(kube_cluster: Any, kube_namespace: str) -> Kube:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    return kube


def argv(cluster: Any, namespace: str, *extra: str) -> list[str]:
    return [
        "--name", NAME, "--namespace", namespace, "--release", "sk", "--kubeconfig",
        str(cluster.kubeconfig), "--poll", "0.2", "--max-env-steps", "2000",
        "--resources", '{"learner": {"cpu": "500m"}}', *extra,
    ]  # fmt: skip


def play_operator(kube: Kube, phases: list[dict[str, Any]]) -> threading.Thread:
    """Once the smoke's Experiment exists, write each status in turn (as the operator would)."""

    def run() -> None:
        wait_for("the smoke's Experiment", lambda: kube.get_or_none(EXPERIMENT, NAME), 30)
        written: dict[str, Any] = {}
        for status in phases:
            time.sleep(0.5)
            # the operator writes the whole status: a field it no longer sets is removed
            patch = {**{k: None for k in written if k not in status}, **status}
            kube.patch(EXPERIMENT, NAME, {"status": patch}, sub="status")
            written = status

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_smoke(cluster: Any, kube: Kube, *extra: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = smoke.run(smoke.parse(argv(cluster, kube.namespace, *extra)), lines.append)
    return code, lines


def test_a_succeeded_experiment_passes_and_is_deleted(kube_cluster: Any, kube: Kube) -> None:
    thread = play_operator(
        kube,
        [
            {"phase": "Pending", "reason": "waiting for the learner"},
            {"phase": "Running", "learnerIteration": 3, "envSteps": 800},
            {"phase": "Succeeded", "learnerIteration": 9, "envSteps": 2000, "evalReturn": 41.5},
        ],
    )
    code, lines = run_smoke(kube_cluster, kube)
    thread.join(10)
    assert code == 0, lines
    assert lines[0].startswith(f"created Experiment {kube.namespace}/{NAME}: PPO on gym:CartPole")
    assert "Running, iteration 3, env steps 800" in lines
    assert lines[-1].startswith("passed in ") and "eval return 41.5" in lines[-1], lines
    assert kube.get_or_none(EXPERIMENT, NAME) is None


def test_a_failed_experiment_fails_with_its_reason(kube_cluster: Any, kube: Kube) -> None:
    thread = play_operator(kube, [{"phase": "Failed", "reason": "learner: CrashLoopBackOff"}])
    code, lines = run_smoke(kube_cluster, kube)
    thread.join(10)
    assert code == 1
    assert lines[-1].startswith("failed after ") and "learner: CrashLoopBackOff" in lines[-1]
    assert kube.get_or_none(EXPERIMENT, NAME) is None


def test_no_end_in_time_fails_and_deletes(kube_cluster: Any, kube: Kube) -> None:
    thread = play_operator(kube, [{"phase": "Running", "learnerIteration": 1}])
    code, lines = run_smoke(kube_cluster, kube, "--timeout", "3")
    thread.join(10)
    assert code == 1
    assert lines[-1].startswith("did not end within 3s: Running"), lines
    assert kube.get_or_none(EXPERIMENT, NAME) is None


def test_an_experiment_not_a_tests_is_left_alone(kube_cluster: Any, kube: Kube) -> None:
    from surreal_kube.experiment.resolve import resolve_experiment

    theirs = experiment_object(resolve_experiment(NAME, sets=SPEC_IMAGES), kube.namespace)
    kube.create(theirs)
    out = subprocess.run(
        [sys.executable, "-m", "surreal_kube.operator.smoke", *argv(kube_cluster, kube.namespace)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2, out
    (line,) = out.stderr.strip().splitlines()
    assert "is not a helm test's (no label surreal.ai/helm-test)" in line, line
    kept = kube.get(EXPERIMENT, NAME)
    assert kept["metadata"]["uid"]  # still there, unchanged
    assert smoke.TEST_LABEL not in (kept["metadata"].get("labels") or {})


def test_a_killed_tests_leftover_is_replaced(kube_cluster: Any, kube: Kube) -> None:
    left = smoke.smoke_object(
        NAME, kube.namespace, release="sk", env="gym:CartPole-v1", max_env_steps=2000,
        num_evals=1, resources={},
    )  # fmt: skip
    old_uid = kube.create(left)["metadata"]["uid"]
    created: list[str] = []

    def record_uid() -> bool:
        obj = kube.get_or_none(EXPERIMENT, NAME)
        if obj is not None and obj["metadata"]["uid"] != old_uid:
            created.append(obj["metadata"]["uid"])
            return True
        return False

    def finish() -> None:
        wait_for("the smoke's own Experiment", record_uid, 30, every=0.1)
        kube.patch(EXPERIMENT, NAME, {"status": {"phase": "Succeeded"}}, sub="status")

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    code, lines = run_smoke(kube_cluster, kube)
    thread.join(10)
    assert code == 0, lines
    assert lines[0] == f"deleting Experiment {kube.namespace}/{NAME}, left by an earlier test"
    assert created and created[0] != old_uid


def test_sigterm_deletes_the_experiment(kube_cluster: Any, kube: Kube) -> None:
    """The pod deleted mid-run (the next `helm test`, activeDeadlineSeconds): nothing stays."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "surreal_kube.operator.smoke", *argv(kube_cluster, kube.namespace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        wait_for("the smoke's Experiment", lambda: kube.get_or_none(EXPERIMENT, NAME), 60)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)
    assert kube.get_or_none(EXPERIMENT, NAME) is None
