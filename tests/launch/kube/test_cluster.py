"""The rendered objects on the real test control plane (kube-apiserver, scheduler, controllers, kwok).

- every object of the spec matrix passes a server-side dry-run (strict field validation);
- an applied experiment schedules: GPU components on gpu-pool nodes, the rest on cpu-pool nodes,
  every pod Running; StatefulSet pods carry their ordinal;
- every connect address a role receives names a Service whose live EndpointSlices hold exactly
  the pod that binds the endpoint, on the right port;
- deleting the root object removes everything (ownerReferences and the garbage collector);
- pre-flight against the pools discovered from the live nodes refuses a spec needing more GPUs.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube.api.client import Kube
from surreal_kube.launch.kube.lifecycle.apply import create_objects
from surreal_kube.launch.kube.placement.pools import discover_pools
from surreal_kube.launch.kube.profile import ClusterProfile, profile_from_dict
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES, MATRIX, endpoint_of_variable, experiment

pytestmark = pytest.mark.cluster


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_server_side_dry_run_of_the_matrix(case: str, kube: Kube, kube_namespace: str) -> None:
    objects = render_experiment(experiment(case), kube_namespace, images=IMAGES)
    stored = create_objects(kube, objects, kube_namespace, dry_run=True)
    assert [o["kind"] for o in stored] == [o["kind"] for o in objects]
    for obj in stored[1:]:
        if obj["kind"] == "PersistentVolumeClaim":  # kept by default: data outlives delete
            assert "ownerReferences" not in obj["metadata"]
            continue
        assert obj["metadata"]["ownerReferences"][0]["name"] == "exp-matrix-config"
    assert (
        kube.list(
            kube.resource_for("v1", "ConfigMap"), kube_namespace, labels="surreal.ai/experiment"
        )
        == []
    )


def test_discovered_pools_match_the_cluster(kube_cluster: Any) -> None:
    with Kube(kubeconfig=kube_cluster.kubeconfig) as kube:
        profile = discover_pools(kube)
    pools = {p.name: p for p in profile.pools}
    # the real node joins this cluster once a test of tests/node asked for it (its own pool)
    assert set(pools) - {"real-pool"} == {"cpu-pool", "gpu-pool"}
    if "real-pool" in pools:
        assert [t.key for t in pools["real-pool"].node_taints] == ["surreal-kube.dev/real-node"]
    assert (pools["cpu-pool"].count, pools["cpu-pool"].millicpu, pools["cpu-pool"].gpus) == (
        4,
        8000,
        0,
    )
    assert (pools["gpu-pool"].count, pools["gpu-pool"].gpus) == (2, 4)
    assert pools["gpu-pool"].accelerator == "nvidia-tesla-t4"
    assert [t.toleration() for t in pools["gpu-pool"].node_taints] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]


def test_preflight_refuses_more_gpus_than_the_cluster_has(kube_cluster: Any) -> None:
    with Kube(kubeconfig=kube_cluster.kubeconfig) as kube:
        profile = discover_pools(kube)
    exp = experiment("eight-agents-batch4-gpu", extra=["agents.batch=1"])  # 8 agent GPUs + learner
    with pytest.raises(SpecError) as err:
        render_experiment(exp, "rl", images=IMAGES, profile=profile)
    assert str(err.value) == (
        "cannot place agents (agent): 8 pods of cpu 1, memory 1Gi, nvidia.com/gpu 1 (cpu 8, "
        "memory 8Gi, nvidia.com/gpu 8 in total) do not fit the node pools: the largest pool for "
        "it, gpu-pool, has 2 nodes of cpu 16, memory 64Gi, nvidia.com/gpu 4, 110 pods each (cpu "
        "32, memory 128Gi, nvidia.com/gpu 8 in total); already placed there: learner (cpu 2, "
        "memory 4Gi, nvidia.com/gpu 1), tensorplex (cpu 250m, memory 512Mi), loggerplex (cpu "
        "250m, memory 512Mi), tensorboard (cpu 250m, memory 512Mi), evals (cpu 500m, memory "
        "1Gi); what fits there: 7 agents (7 pods of 1 agent), nvidia.com/gpu 7 of the 7 left"
    )


@pytest.fixture
def volume_class(kube_cluster: Any) -> Iterator[str]:
    """A static ReadWriteMany PersistentVolume the experiment's claim binds to (no provisioner)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"sk-test-{uuid.uuid4().hex[:8]}"
    with kube_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_persistent_volume(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": name,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{name}"},
                },
            }
        )
        try:
            yield name
        finally:
            with contextlib.suppress(ApiException):  # gone already is fine
                core.delete_persistent_volume(name)


def test_applied_experiment_schedules_wires_and_deletes(
    kube_cluster: Any, kube: Kube, kube_namespace: str, volume_class: str
) -> None:
    discovered = discover_pools(kube)
    profile: ClusterProfile = discovered.model_copy(
        update={
            "experiment_volume": profile_from_dict(
                # shared by nodes (each pod where its pool says) and owned by the root
                {
                    "experimentVolume": {
                        "storageClassName": volume_class,
                        "accessMode": "ReadWriteMany",
                        "retain": False,
                    }
                }
            ).experiment_volume
        }
    )
    exp = experiment(
        "eight-agents-batch4-gpu", extra=["replay.shards=2", "ps.shards=2", "evals.count=2"]
    )
    objects = render_experiment(exp, kube_namespace, images=IMAGES, profile=profile)
    create_objects(kube, objects, kube_namespace)

    pods_res = kube.resource_for("v1", "Pod")
    expected_pods = (
        6 + 2 + 2
    )  # learner replay ps tensorplex loggerplex tensorboard + agents + evals

    def running() -> list[dict]:
        pods = kube.list(pods_res, kube_namespace, labels="surreal.ai/experiment=exp-matrix")
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == expected_pods and len(ok) == expected_pods else []

    pods = wait_for("every pod Running", running)
    nodes = {n["metadata"]["name"]: n for n in kube.list(kube.resource_for("v1", "Node"), None)}
    gpu_groups = {"learner", "agents"}
    for pod in pods:
        group = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        node = nodes[pod["spec"]["nodeName"]]
        pool = node["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
        assert pool == ("gpu-pool" if group in gpu_groups else "cpu-pool"), (
            pod["metadata"]["name"],
            pool,
        )
        if group in ("agents", "evals"):
            ordinal = pod["metadata"]["name"].rsplit("-", 1)[1]
            assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == ordinal
    claim = kube.get(
        kube.resource_for("v1", "PersistentVolumeClaim"), "exp-matrix-data", kube_namespace
    )
    assert claim["status"]["phase"] == "Bound"

    # every connect address -> a Service whose EndpointSlices hold exactly the binding pod
    slices_res = kube.resource_for("discovery.k8s.io/v1", "EndpointSlice")
    pod_by_name = {p["metadata"]["name"]: p for p in pods}
    checked: set[str] = set()
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for env in container["env"]:
                if not env["name"].endswith("_ADDR") or "://127.0.0.1:" in env.get("value", ""):
                    continue
                endpoint = endpoint_of_variable(env["name"])
                host, port = env["value"].split("://")[1].rsplit(":", 1)
                service, namespace = host.split(".")[:2]
                assert namespace == kube_namespace
                binder_group = service.removeprefix("exp-matrix-")

                def ready_slice(service: str = service, port: str = port) -> list[str]:
                    slices = kube.list(
                        slices_res, kube_namespace, labels=f"kubernetes.io/service-name={service}"
                    )
                    targets = [
                        e["targetRef"]["name"]
                        for s in slices
                        for e in s.get("endpoints") or []
                        if (e.get("conditions") or {}).get("ready")
                        and int(port) in [p["port"] for p in s.get("ports") or []]
                    ]
                    return targets

                (target,) = wait_for(f"EndpointSlice of {service}", ready_slice, timeout=60)
                assert (
                    pod_by_name[target]["metadata"]["labels"]["app.kubernetes.io/component"]
                    == binder_group
                )
                declared = [
                    p["containerPort"]
                    for c in pod_by_name[target]["spec"]["containers"]
                    for p in c.get("ports") or []
                ]
                assert int(port) in declared and endpoint.port == int(port)
                checked.add(endpoint.name)
    assert checked == {
        "parameter-publish",
        "replay-collector-0",
        "replay-collector-1",
        "replay-sampler",
        "ps-serve",
        "tensorplex",
        "loggerplex",
    }

    # one delete of the root removes everything (the garbage collector follows ownerReferences)
    kube.delete(
        kube.resource_for("v1", "ConfigMap"),
        "exp-matrix-config",
        kube_namespace,
        propagation="Background",
    )

    def gone() -> bool:
        for api_version, kind in (
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("v1", "Service"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "Pod"),
        ):
            left = kube.list(
                kube.resource_for(api_version, kind),
                kube_namespace,
                labels="surreal.ai/experiment=exp-matrix",
            )
            if left:
                return False
        return True

    wait_for("everything garbage-collected", gone, timeout=120)


def test_render_discover_checks_against_the_live_nodes(kube_cluster: Any) -> None:
    args = [sys.executable, "-m", "surreal_kube.cli.main", "render", "exp", "--discover"]
    args += ["--image", "cpu=a:b", "--image", "gpu=c:d", "--set", "resources.agent.gpu=1"]
    ok = subprocess.run(args, capture_output=True, text=True, env=kube_cluster.env(), timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "cloud.google.com/gke-nodepool: gpu-pool" in ok.stdout
    refused = subprocess.run(
        [*args, "--num-agents", "9"],
        capture_output=True,
        text=True,
        env=kube_cluster.env(),
        timeout=120,
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "error: cannot place agents (agent): 9 pods of cpu 1, memory 1Gi, nvidia.com/gpu 1"
    )
