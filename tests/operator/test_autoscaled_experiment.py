"""A GPU experiment on a cluster whose GPU pool is at zero nodes (issue 24): created, the
autoscaler (Karpenter's kwok provider, tests/cluster/addons.py) adds a node, the learner is
scheduled there and Running; `delete` lets the pools go back to zero. Directly and through the
operator, whose status and Events say what the experiment waits for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, POD, Kube
from surreal_kube.operator.events import EVENT
from tests.cluster import addons
from tests.cluster.fixtures import AutoscaledCluster
from tests.operator.support import (
    IMAGE_ARGS,
    PROFILE_TEXT,
    TINY,
    ensure_crd,
    running_operator,
    sk,
    wait_for,
)

pytestmark = pytest.mark.cluster

GPU_LEARNER = ["--set", "resources.learner.gpu=1"]


def scaled_profile(tmp_path: Path) -> Path:
    """The profile a GKE user keeps: the pools at zero, declared with their maxima and shapes."""
    pools = [p.declared() for p in addons.DEFAULT_SCALED_POOLS]
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE_TEXT + yaml.safe_dump({"pools": pools}))
    return path


def running_learner(kube: Kube, name: str) -> dict[str, Any] | None:
    pods = kube.list(POD, labels=naming.selector_labels(name, "learner"))
    return next((p for p in pods if p["status"].get("phase") == "Running"), None)


def assert_on_a_new_gpu_node(cluster: AutoscaledCluster, learner: dict[str, Any]) -> None:
    assert learner["spec"]["nodeName"] in cluster.autoscaler.pool_nodes("gpu-pool")


def wait_pools_empty(cluster: AutoscaledCluster) -> None:
    wait_for(
        "both pools back at zero nodes",
        lambda: (
            not cluster.autoscaler.pool_nodes("gpu-pool")
            and not cluster.autoscaler.pool_nodes("cpu-pool")
        ),
        timeout=180,
    )


def test_a_gpu_experiment_waits_for_the_gpu_pool_to_grow_from_zero(
    autoscaled_cluster: AutoscaledCluster, tmp_path: Path
) -> None:
    cluster = autoscaled_cluster
    assert cluster.autoscaler.pool_nodes("gpu-pool") == []
    ns = cluster.create_namespace("t-gpu-zero")
    try:
        with Kube(kubeconfig=cluster.kubeconfig, namespace=ns) as kube:
            res = sk(
                cluster,
                "create", "exp-gpu", "-n", ns, "--no-wait", "--profile",
                str(scaled_profile(tmp_path)), *IMAGE_ARGS, *TINY, *GPU_LEARNER,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            # the learner's bundle on one GPU node, replay, ps and agents on one CPU node
            assert (
                "exp-gpu: waiting for the autoscaler: cpu-pool 0 -> 1, gpu-pool 0 -> 1 "
                "(nodes now -> nodes it needs, at the least)"
            ) in res.stderr, res.stderr
            learner = wait_for(
                "the learner Running on a node the autoscaler added",
                lambda: running_learner(kube, "exp-gpu"),
                timeout=180,
            )
            assert_on_a_new_gpu_node(cluster, learner)
            status = sk(cluster, "status", "exp-gpu", "-n", ns, "-o", "json")
            assert status.returncode == 0, status.stderr
            res = sk(cluster, "delete", "exp-gpu", "-n", ns, "--wait")
            assert res.returncode == 0, res.stderr
            wait_pools_empty(cluster)
    finally:
        cluster.delete_namespace(ns)


def test_the_operator_says_it_waits_for_the_autoscaler_then_runs(
    autoscaled_cluster: AutoscaledCluster, tmp_path: Path
) -> None:
    cluster = autoscaled_cluster
    ns = cluster.create_namespace("t-gpu-zero-op")
    profile = scaled_profile(tmp_path)
    try:
        with Kube(kubeconfig=cluster.kubeconfig, namespace=ns) as kube:
            ensure_crd(kube)
            with running_operator(cluster, ns, tmp_path, "--profile", str(profile)):
                res = sk(
                    cluster,
                    "create", "exp-gpu-op", "-n", ns, "--no-wait", "--profile", str(profile),
                    *IMAGE_ARGS, *TINY, *GPU_LEARNER,
                )  # fmt: skip
                assert res.returncode == 0, res.stderr
                # what the whole experiment needs, though agents start once the learner is Ready
                event = wait_for(
                    "the operator's Event that it waits for the autoscaler",
                    lambda: next(
                        (
                            e
                            for e in kube.list(EVENT)
                            if e["involvedObject"]["name"] == "exp-gpu-op"
                            and e["reason"] == "WaitingForAutoscaler"
                        ),
                        None,
                    ),
                )
                assert event["message"] == (
                    "waiting for the autoscaler: cpu-pool 0 -> 1, gpu-pool 0 -> 1"
                )
                wait_for(
                    "exp-gpu-op Running",
                    lambda: (
                        (kube.get(EXPERIMENT, "exp-gpu-op").get("status") or {}).get("phase")
                        == "Running"
                    ),
                    timeout=240,
                )
                assert_on_a_new_gpu_node(cluster, running_learner(kube, "exp-gpu-op") or {})
                kube.delete(EXPERIMENT, "exp-gpu-op")
                wait_for(
                    "every pod of exp-gpu-op gone",
                    lambda: not kube.list(POD, labels=naming.experiment_selector("exp-gpu-op")),
                    timeout=120,
                )
            wait_pools_empty(cluster)
    finally:
        cluster.delete_namespace(ns)
