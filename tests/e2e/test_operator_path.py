"""The operator's path on a real node (issue 12): `helm install` with the image built here runs the
operator as a pod; `helm test` passes (a tiny Experiment of its own to Succeeded); an Experiment
applied with kubectl runs to Succeeded, its progress in the Experiment's status and printer
columns on the way; `helm uninstall` leaves nothing of the operator.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.charts.helm import CHART
from tests.e2e.support import MARKS, E2ECluster, RunFailedError, wait_for

pytestmark = MARKS

RELEASE = "sk"
NAMESPACE = "rl"
NAME = "exp-op"
LEAN = {
    # one agent and the operator beside it on the node's 2 cores
    "learner": {"cpu": "500m", "memory": "2Gi"},
    "agent": {"cpu": "200m", "memory": "1Gi"},
    "eval": {"cpu": "150m", "memory": "1Gi"},
    "replay": {"cpu": "150m", "memory": "1Gi"},
    "ps": {"cpu": "150m", "memory": "512Mi"},
    "tensorplex": {"cpu": "150m", "memory": "512Mi"},
    "loggerplex": {"cpu": "100m", "memory": "512Mi"},
    "tensorboard": {"cpu": "100m", "memory": "768Mi"},
}


def helm(cluster: E2ECluster, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [str(Path(cluster.cp.bin_dir) / "helm"), *args],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def no_operator_left(e2e: E2ECluster) -> Iterator[None]:
    """Whatever the test's outcome, later tests meet the cluster without the operator: an
    operator left watching its namespace with the CRD installed would make every later `create`
    go through it (and wait for an operator that does not watch their namespace)."""
    yield
    helm(e2e, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m", check=False)
    e2e.kubectl(
        "delete", "crd", "experiments.surreal.ai", "--ignore-not-found", "--wait=true",
        timeout=180, check=False,
    )  # fmt: skip


def experiment_status(cluster: E2ECluster, *, failed_ok: bool = False) -> dict:
    out = cluster.kubectl("get", "experiment", NAME, "-n", NAMESPACE, "-o", "json")
    status = json.loads(out).get("status") or {}
    if status.get("phase") == "Failed" and not failed_ok:
        raise RunFailedError(status.get("reason"))
    return status


def test_helm_install_kubectl_apply_succeeds_helm_uninstall_leaves_nothing(
    e2e: E2ECluster, tmp_path: Path, no_operator_left: None
) -> None:
    assert e2e.image
    repository, tag = e2e.image.rsplit(":", 1)
    helm(
        e2e, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "resources.requests.cpu=50m",
        "--wait", "--timeout", "10m",
    )  # fmt: skip
    pods = json.loads(e2e.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    operator = [p for p in pods if p["metadata"]["name"].startswith(RELEASE)]
    assert operator and all(p["status"]["phase"] == "Running" for p in operator), pods
    assert all(p["spec"]["nodeName"] == "real-0" for p in operator)

    # the chart's own check, as a user runs it after installing: `helm test` runs one tiny
    # Experiment through the operator to Succeeded on the chart's defaults, prints its log and
    # leaves nothing behind
    done = subprocess.run(
        [str(Path(e2e.cp.bin_dir) / "helm"), "test", RELEASE, "-n", NAMESPACE, "--timeout", "20m"],
        capture_output=True, text=True, env=e2e.env, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, f"helm test: {done.stdout}\n{done.stderr}"
    assert re.search(r"Phase:\s+Succeeded", done.stdout), done.stdout
    # the learner's iteration is in the line only once a status report carried it; a 10,000-step
    # CartPole run can end first: the phase and the budget reached are what the check promises
    assert re.search(r"passed in \d+s: Succeeded, .*env steps 10000", done.stderr), done.stderr
    left = e2e.kubectl(
        "get", "pods,serviceaccounts,roles,rolebindings,experiments", "-n", NAMESPACE,
        "-l", "app.kubernetes.io/component=helm-test", "-o", "name",
    )  # fmt: skip
    assert not left.strip(), left
    assert not e2e.kubectl("get", "experiments", "-n", NAMESPACE, "-o", "name").strip()

    # an Experiment as a user writes it: `surreal-kube config` prints one to start from
    doc = yaml.safe_load(
        e2e.sk(
            "config", NAME, "-a", "ppo", "-e", "gym:CartPole-v1",
            "--num-agents", "1", "--num-evals", "1", "--max-env-steps", "40000",
            "-o", "yaml",
        ).stdout
    )  # fmt: skip
    doc["metadata"]["namespace"] = NAMESPACE
    doc["spec"]["resources"] = {k: {**v, "gpu": 0} for k, v in LEAN.items()}
    # the images as printed: a build, which the operator runs on its own image (the chart's
    # default experimentImages.cpu); before, this test had to overwrite spec.images.cpu
    assert doc["spec"]["images"]["cpu"]["image"] is None and doc["spec"]["images"]["cpu"]["build"]
    manifest = tmp_path / "experiment.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    e2e.kubectl("apply", "-f", str(manifest))

    # the learner may iterate before every pod is Ready (the phase is Pending until then), and
    # on an idle machine the budget may be spent by the next read: either phase will do
    wait_for(
        "the Experiment's status with a learner iteration, every pod ready",
        lambda: (
            (s := experiment_status(e2e)).get("learnerIteration")
            and s.get("phase") in ("Running", "Succeeded")
        ),
        timeout=900,
        every=5,
    )
    header, line = e2e.kubectl("get", "experiment", NAME, "-n", NAMESPACE).splitlines()[:2]
    assert "ITERATION" in header and "RETURN" in header, header
    assert re.search(r"\b(Running|Succeeded)\b", line), line

    done = wait_for(
        "the Experiment to end",
        lambda: (
            (s := experiment_status(e2e, failed_ok=True)).get("phase") in ("Succeeded", "Failed")
            and s
        ),
        timeout=1200,
        every=5,
    )
    assert done["phase"] == "Succeeded", done
    assert done.get("evalReturn") is not None, done
    wait_for(
        "no pod of the experiment",
        lambda: (
            not e2e.kubectl(
                "get",
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                f"app.kubernetes.io/instance={NAME}",
                "-o",
                "name",
            ).strip()
        ),
        timeout=300,
    )
    # the results outlive the compute
    out = tmp_path / "results"
    e2e.sk("results", NAME, "-n", NAMESPACE, "-o", str(out), timeout=60)
    assert json.loads((out / "summary.json").read_text()).get("final_return") is not None

    e2e.kubectl("delete", "experiment", NAME, "-n", NAMESPACE, "--wait=true", timeout=300)
    helm(e2e, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
    # the Deployment's pods go by the garbage collector, after their grace period: wait for it
    for kind in ("deployments", "pods", "serviceaccounts", "roles", "rolebindings", "configmaps"):
        wait_for(
            f"no {kind} of the release",
            lambda kind=kind: not e2e.kubectl(
                "get", kind, "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}",
                "-o", "name",
            ).strip(),
            timeout=180,
        )  # fmt: skip
    cluster_wide = e2e.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={RELEASE}",
        "-o", "name",
    )  # fmt: skip
    assert not cluster_wide.strip(), cluster_wide
    # Helm keeps a chart's CRDs on uninstall (deleting one deletes every object of its kind);
    # remove it as an admin would, so later tests meet a cluster without the operator's API
    e2e.kubectl("delete", "crd", "experiments.surreal.ai", "--wait=true", timeout=120)
