"""Without Kueue, the operator starts agents and evals only once the learner is Ready (issue 27
item 1): while the learner cannot be scheduled, no agent pod holds CPU and polls for parameters
(at scale an autoscaler would buy CPU nodes only for them to wait), and the status says why.

Before, every workload was applied at once: the agents ran while the learner stayed Pending."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import EXPERIMENT, resource
from tests.operator.support import (
    connect,
    ensure_crd,
    objects_of,
    profile_file,
    running_operator,
    running_pods,
    tiny_experiment,
    wait_for,
)

pytestmark = pytest.mark.cluster

STS = resource("apps/v1", "StatefulSet")
DEPLOY = resource("apps/v1", "Deployment")


def test_agents_and_evals_wait_for_the_learner_then_start(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    name = "exp-first"
    # a learner no node can hold (placement left to the scheduler: it stays Pending)
    big = tiny_experiment(kube_namespace, name, "agents.count=2", "resources.learner.cpu=500")
    with running_operator(
        kube_cluster, kube_namespace, tmp_path, "--profile", str(profile_file(tmp_path)),
        "--no-read-nodes",
        "--resync", "3600",  # the learner pod's Ready event starts them, not the safety net
    ):  # fmt: skip
        kube.apply(big)

        def waiting() -> dict[str, Any] | None:
            st = kube.get(EXPERIMENT, name).get("status") or {}
            return st if "start once the learner is Ready" in (st.get("reason") or "") else None

        st = wait_for("the status to say the agents wait", waiting, timeout=60)
        assert st["phase"] == "Pending"
        cond = next(c for c in st["conditions"] if c["type"] == "LearnerReady")
        assert cond["status"] == "False" and cond["reason"] == "WaitingForLearner"
        workloads = {o["metadata"]["name"] for o in objects_of(kube, name, [STS, DEPLOY])}
        assert f"{name}-learner" in workloads and f"{name}-replay" in workloads
        assert f"{name}-agents" not in workloads and f"{name}-evals" not in workloads
        assert running_pods(kube, name, "agents") == []

        # the learner fits once it asks for less: Ready, then its agents and evals start
        kube.apply(tiny_experiment(kube_namespace, name, "agents.count=2"))
        wait_for(
            "the agents running", lambda: len(running_pods(kube, name, "agents")) == 2, timeout=120
        )
        wait_for(
            "Running",
            lambda: (kube.get(EXPERIMENT, name).get("status") or {}).get("phase") == "Running",
            timeout=120,
        )
        conds = kube.get(EXPERIMENT, name)["status"]["conditions"]
        assert next(c for c in conds if c["type"] == "LearnerReady")["status"] == "True"
