"""The experiment volume: a default that binds on a ReadWriteOnce-only cluster, pre-flight of the
StorageClass, and data that outlives `delete` unless asked.

Rendering and placement without a cluster; then on the test control plane, whose default
StorageClass `standard` is ReadWriteOnce with WaitForFirstConsumer binding, served by
tests/cluster/provisioner.py (like kind's local-path provisioner).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import Kube, Resource, resource
from surreal_kube.launch.kube.lifecycle.apply import create_objects
from surreal_kube.launch.kube.placement.place import place
from surreal_kube.launch.kube.placement.storage import STORAGE_CLASS
from surreal_kube.launch.kube.profile import (
    ClusterProfile,
    load_profile,
    profile_from_dict,
)
from surreal_kube.launch.kube.render.objects import DATA_LABEL, render_experiment
from tests.operator.support import IMAGE_ARGS, IMAGES, TINY, objects_of, sk, wait_for

ROOT = Path(__file__).resolve().parents[3]
KWOK_POOLS = ROOT / "tests" / "cluster" / "kwok" / "pools.yaml"
CLAIM = resource("v1", "PersistentVolumeClaim")
POD = resource("v1", "Pod")
NODE = resource("v1", "Node")
VOLUME = Resource("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
DATA_GROUPS = {"learner", "tensorplex", "loggerplex", "tensorboard", "evals"}
OTHER_GROUPS = {"agents", "replay", "ps"}
TINY_SETS = [TINY[i + 1] for i in range(0, len(TINY), 2)]


def exp_of(name: str = "exp-st", sets: list[str] | None = None) -> Any:
    return resolve_experiment(name, sets=["evals.count=2", *TINY_SETS, *(sets or [])])


def pods_by_group(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o["spec"]["template"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }


def experiment_volume(template: dict[str, Any]) -> dict[str, Any]:
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "experiment"]
    return volume


# ------------------------------------------------------------------------------ rendering


def test_default_claim_is_read_write_once_and_only_data_pods_mount_it() -> None:
    objects = render_experiment(exp_of(), "rl", images=IMAGES)
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    pods = pods_by_group(objects)
    assert set(pods) == DATA_GROUPS | OTHER_GROUPS
    # the learner anchors the volume's node; the others follow it (and wait for it)
    follow = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {
                    "matchLabels": {naming.EXPERIMENT_LABEL: "exp-st", DATA_LABEL: "anchor"}
                },
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    rejoin = {  # a rescheduled learner prefers where its followers still run
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {
                        "matchLabels": {naming.EXPERIMENT_LABEL: "exp-st", DATA_LABEL: "follower"}
                    },
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }
    for group, pod in pods.items():
        volume = experiment_volume(pod)
        mount = [
            m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "experiment"
        ]
        assert mount == [{"name": "experiment", "mountPath": "/experiment"}], group
        if group in DATA_GROUPS:
            assert volume["persistentVolumeClaim"] == {"claimName": "exp-st-data"}, group
            anchor = group == "learner"
            assert pod["metadata"]["labels"][DATA_LABEL] == ("anchor" if anchor else "follower")
            affinity = pod["spec"]["affinity"]
            assert affinity["podAffinity"] == (rejoin if anchor else follow), group
        else:  # status files nobody reads on a cluster: a folder of the pod's own
            assert volume == {"name": "experiment", "emptyDir": {}}, group
            assert DATA_LABEL not in pod["metadata"]["labels"]
            assert "podAffinity" not in pod["spec"].get("affinity", {}), group


@pytest.mark.parametrize(
    "volume",
    [
        {"accessMode": "ReadWriteMany", "storageClassName": "filestore"},
        {"kind": "nfs", "server": "10.0.0.2", "path": "/exports/rl"},
    ],
)
def test_a_shared_volume_spreads_with_no_affinity(volume: dict[str, Any]) -> None:
    profile = profile_from_dict({"experimentVolume": volume})
    pods = pods_by_group(render_experiment(exp_of(), "rl", images=IMAGES, profile=profile))
    for group, pod in pods.items():
        assert "podAffinity" not in pod["spec"].get("affinity", {}), group
        assert DATA_LABEL not in pod["metadata"]["labels"]
        kinds = set(experiment_volume(pod)) - {"name"}
        expected = {"persistentVolumeClaim"} if "accessMode" in volume else {"nfs"}
        want = expected if group in DATA_GROUPS else {"emptyDir"}
        assert kinds == want, group


def test_the_claim_is_kept_unless_the_profile_says_otherwise() -> None:
    owner = {"apiVersion": "surreal.ai/v1alpha1", "kind": "Experiment", "name": "exp-st"}
    owner = {**owner, "uid": "u-1"}
    kept = render_experiment(exp_of(), "rl", images=IMAGES, owner=owner)
    (claim,) = [o for o in kept if o["kind"] == "PersistentVolumeClaim"]
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["annotations"] == {"surreal.ai/retain": "true"}
    gone = profile_from_dict({"experimentVolume": {"retain": False}})
    objects = render_experiment(exp_of(), "rl", images=IMAGES, owner=owner, profile=gone)
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_read_write_once_pod_is_refused_in_the_profile() -> None:
    with pytest.raises(SpecError, match="ReadWriteOncePod lets one pod use the folder"):
        profile_from_dict({"experimentVolume": {"accessMode": "ReadWriteOncePod"}})


# ------------------------------------------------------------------------------ placement


def kwok_profile(**volume: Any) -> ClusterProfile:
    profile = load_profile(KWOK_POOLS)
    return profile.model_copy(
        update={
            "experiment_volume": profile_from_dict({"experimentVolume": volume}).experiment_volume
        }
    )


def test_data_groups_follow_a_gpu_learner_and_tolerate_its_pool() -> None:
    exp = exp_of(sets=["resources.learner.gpu=1"])
    out = place(exp, exp.topology, kwok_profile())
    for group in DATA_GROUPS:
        assert out[group].pool == "gpu-pool", group
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                "effect": "NoSchedule"} in out[group].tolerations  # fmt: skip
    assert {out[g].pool for g in OTHER_GROUPS} == {"cpu-pool"}
    spread = place(exp, exp.topology, kwok_profile(accessMode="ReadWriteMany"))
    assert spread["tensorboard"].pool == "cpu-pool" and not spread["tensorboard"].tolerations


def test_data_groups_that_cannot_share_one_node_are_refused() -> None:
    # 5 evals of 2 CPUs beside the learner: more than one 8-CPU node of cpu-pool
    exp = resolve_experiment("exp-st", sets=["evals.count=5", "resources.eval.cpu=2"])
    with pytest.raises(SpecError) as err:
        place(exp, exp.topology, kwok_profile())
    text = str(err.value)
    assert text.startswith(
        "cannot place learner with the pods that share its node (the experiment volume is "
        "ReadWriteOnce: learner (cpu 2, memory 4Gi), tensorplex (cpu 250m, memory 512Mi), "
        "loggerplex (cpu 250m, memory 512Mi), tensorboard (cpu 250m, memory 512Mi), evals (5 x "
        "cpu 2, memory 1Gi); together cpu 12750m, memory 10752Mi): only tainted node pools have "
        "nodes that large (gpu-pool)"
    ), text
    # spread over nodes, they fit
    place(exp, exp.topology, kwok_profile(accessMode="ReadWriteMany"))


def test_data_groups_named_on_different_pools_are_refused() -> None:
    exp = exp_of(sets=["placement.learner=gpu-pool", "placement.tensorboard=cpu-pool"])
    with pytest.raises(SpecError) as err:
        place(exp, exp.topology, kwok_profile())
    assert str(err.value).startswith(
        "spec.placement.learner='gpu-pool', spec.placement.tensorboard='cpu-pool': with a "
        "ReadWriteOnce experiment volume the learner, tensorplex, loggerplex, tensorboard and "
        "evals share the learner's node (one pool)"
    )


# ------------------------------------------------------------------------------ on a cluster


def claim_phase(kube: Kube, name: str) -> str | None:
    claim = kube.get_or_none(CLAIM, naming.data_name(name), kube.namespace)
    return None if claim is None else (claim.get("status") or {}).get("phase")


@pytest.mark.cluster
def test_default_claim_binds_and_data_pods_share_one_kwok_node(
    kube_cluster: Any, kube: Kube, kube_namespace: str
) -> None:
    from surreal_kube.launch.kube.placement.pools import discover_pools

    exp = exp_of("exp-rwo")
    objects = render_experiment(exp, kube_namespace, images=IMAGES, profile=discover_pools(kube))
    create_objects(kube, objects, kube_namespace)
    wait_for("the claim Bound", lambda: claim_phase(kube, "exp-rwo") == "Bound", timeout=120)
    want = 6 + 2 + exp.spec.agents.groups

    def running() -> list[dict[str, Any]]:
        pods = kube.list(POD, kube_namespace, labels=naming.experiment_selector("exp-rwo"))
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return ok if len(ok) == want else []

    pods = wait_for("every pod Running", running, timeout=120)
    nodes = {
        p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["app.kubernetes.io/component"] in DATA_GROUPS
    }
    assert len(nodes) == 1, nodes
    (node,) = nodes
    assert kube.get(NODE, node)["metadata"]["labels"]["type"] == "kwok"
    claim = kube.get(CLAIM, "exp-rwo-data", kube_namespace)
    assert claim["spec"]["storageClassName"] == "standard"
    volume = kube.get(VOLUME, claim["spec"]["volumeName"])
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [node]


@pytest.mark.cluster
def test_the_data_pods_wait_for_the_learner_to_pick_the_node(
    kube_cluster: Any, kube: Kube, kube_namespace: str
) -> None:
    """Before, every data pod carried the label its affinity selected: the first scheduled (a
    small tensorplex) picked the node and the learner could stay Pending there for good. Now
    the followers, created first here, wait until the learner has a node, then join it."""
    from surreal_kube.launch.kube.placement.pools import discover_pools

    exp = exp_of("exp-anchor")
    objects = render_experiment(exp, kube_namespace, images=IMAGES, profile=discover_pools(kube))
    learner = [
        o
        for o in objects
        if o["metadata"]["name"] == "exp-anchor-learner" and o["kind"] == "Deployment"
    ]
    assert len(learner) == 1
    create_objects(kube, [o for o in objects if o not in learner], kube_namespace)
    selector = naming.experiment_selector("exp-anchor")

    def followers_refused() -> list[dict[str, Any]]:
        pods = kube.list(POD, kube_namespace, labels=selector)
        data = [p for p in pods if p["metadata"]["labels"].get(DATA_LABEL) == "follower"]
        tried = [
            p
            for p in data
            if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        # every follower's pod, not those its controller has made so far (CI once saw two of
        # four, both refused already, and took them for all)
        groups = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in data}
        every = groups == DATA_GROUPS - {"learner"}
        return data if every and len(tried) == len(data) else []

    waiting = wait_for("the scheduler to hold the followers", followers_refused, timeout=120)
    assert {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in waiting} == (
        DATA_GROUPS - {"learner"}
    )
    assert not any(p["spec"].get("nodeName") for p in waiting)
    create_objects(kube, learner, kube_namespace)
    want = 6 + 2 + exp.spec.agents.groups

    def running() -> list[dict[str, Any]]:
        pods = kube.list(POD, kube_namespace, labels=selector)
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return ok if len(ok) == want else []

    pods = wait_for("every pod Running", running, timeout=180)
    nodes = {
        p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["app.kubernetes.io/component"] in DATA_GROUPS
    }
    assert set(nodes.values()) == {nodes["learner"]}, nodes


@pytest.fixture
def local_path_class(kube_cluster: Any) -> Iterator[str]:
    """A StorageClass of kind's local-path provisioner (ReadWriteOnce only)."""
    name = f"sk-local-path-{uuid.uuid4().hex[:6]}"
    with Kube(kubeconfig=kube_cluster.kubeconfig) as kube:
        kube.create(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "rancher.io/local-path",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
        try:
            yield name
        finally:
            kube.delete(STORAGE_CLASS, name)


def refused(kube_cluster: Any, kube: Kube, tmp_path: Path, volume: str, name: str) -> str:
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"experimentVolume: {volume}\n")
    args = ["create", name, "-n", kube.namespace, "--direct", "--profile", str(profile)]
    res = sk(kube_cluster, *args, *IMAGE_ARGS, *TINY)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert objects_of(kube, name) == []
    return res.stderr.strip()


@pytest.mark.cluster
def test_pre_flight_refuses_a_claim_no_class_can_serve(
    kube_cluster: Any, kube: Kube, tmp_path: Path, local_path_class: str
) -> None:
    line = refused(kube_cluster, kube, tmp_path, "{storageClassName: fast}", "exp-nofast")
    assert line.startswith(
        "error: experimentVolume.storageClassName: no StorageClass 'fast' in the cluster (classes: "
    ) and line.endswith("; default: standard): the claim exp-nofast-data would stay Pending")
    line = refused(
        kube_cluster, kube, tmp_path,
        f"{{storageClassName: {local_path_class}, accessMode: ReadWriteMany}}", "exp-rwx",
    )  # fmt: skip
    assert line.startswith(
        f"error: experimentVolume.accessMode: ReadWriteMany on StorageClass {local_path_class!r}, "
        "whose provisioner rancher.io/local-path makes ReadWriteOnce volumes only: the claim "
        "exp-rwx-data would stay Pending; use a class of filestore.csi.storage.gke.io"
    ), line
    line = refused(kube_cluster, kube, tmp_path, "{accessMode: ReadWriteMany}", "exp-rwx2")
    assert "StorageClass 'standard', whose provisioner surreal-kube.dev/test-local" in line


@pytest.mark.cluster
def test_pre_flight_refuses_a_cluster_with_no_default_class(
    kube_cluster: Any, kube: Kube, tmp_path: Path
) -> None:
    key = "storageclass.kubernetes.io/is-default-class"

    def mark(value: str) -> None:
        kube.patch(STORAGE_CLASS, "standard", {"metadata": {"annotations": {key: value}}})

    mark("false")
    try:
        line = refused(kube_cluster, kube, tmp_path, "{size: 1Gi}", "exp-nodefault")
    finally:
        mark("true")
    assert line.startswith(
        "error: experimentVolume: the cluster has no default StorageClass (classes: "
    ) and line.endswith(
        "), so the claim exp-nodefault-data would stay Pending and with it every pod that "
        "mounts it: set experimentVolume.storageClassName in the profile, or kind: nfs"
    ), line


@pytest.mark.cluster
def test_delete_keeps_the_data_and_says_so_unless_asked(
    kube_cluster: Any, kube: Kube, kube_namespace: str
) -> None:
    ns = kube_namespace
    for name in ("exp-keep", "exp-drop"):
        res = sk(kube_cluster, "create", name, "-n", ns, "--direct", *IMAGE_ARGS, *TINY)
        assert res.returncode == 0, res.stderr
        assert claim_phase(kube, name) == "Bound"
    res = sk(kube_cluster, "delete", "exp-keep", "--wait", "-n", ns)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().endswith(
        f"deleted exp-keep from namespace {ns} (all gone); data kept in PersistentVolumeClaim "
        f"exp-keep-data; remove it with `kubectl delete pvc exp-keep-data -n {ns}`"
    ), res.stderr
    assert claim_phase(kube, "exp-keep") == "Bound"
    assert [o["kind"] for o in objects_of(kube, "exp-keep")] == ["PersistentVolumeClaim"]
    # a new run of that name would mix its data with the kept one's: refused, nothing created
    res = sk(kube_cluster, "create", "exp-keep", "-n", ns, "--direct", *IMAGE_ARGS, *TINY)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == (
        "error: the data of an earlier exp-keep is still in PersistentVolumeClaim exp-keep-data "
        f"(delete keeps it): remove it first with `kubectl delete pvc exp-keep-data -n {ns}`, or "
        "use another name"
    )
    assert [o["kind"] for o in objects_of(kube, "exp-keep")] == ["PersistentVolumeClaim"]

    res = sk(kube_cluster, "delete", "exp-drop", "--wait", "--delete-data", "-n", ns)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().endswith(
        f"deleted exp-drop from namespace {ns} (all gone); data removed (PersistentVolumeClaim "
        "exp-drop-data deleted)"
    ), res.stderr
    wait_for("the claim gone", lambda: claim_phase(kube, "exp-drop") is None, timeout=60)


@pytest.mark.cluster
def test_delete_says_nothing_of_data_it_does_not_hold(
    kube_cluster: Any, kube: Kube, kube_namespace: str, tmp_path: Path
) -> None:
    ns, profile = kube_namespace, tmp_path / "profile.yaml"
    profile.write_text("experimentVolume: {kind: emptyDir}\n")
    args = ["create", "exp-none", "-n", ns, "--direct", "--profile", str(profile)]
    res = sk(kube_cluster, *args, *IMAGE_ARGS, *TINY)
    assert res.returncode == 0, res.stderr
    res = sk(kube_cluster, "delete", "exp-none", "--wait", "-n", ns)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().endswith(f"deleted exp-none from namespace {ns} (all gone)")


@pytest.mark.cluster
def test_credentials_that_cannot_read_classes_skip_the_check(
    kube_cluster: Any, kube: Kube, kube_namespace: str, tmp_path: Path
) -> None:
    """The namespaced `edit` role may not read StorageClasses: pre-flight says nothing then
    (the admin is refused the same request), rather than refusing every experiment."""
    import json

    from surreal_kube.launch.kube.placement.storage import check_storage
    from surreal_kube.launch.kube.profile import ExperimentVolume
    from tests.launch.kube.identities import bound_token

    ns = kube_namespace
    token = bound_token(kube, ns, "user", "edit")
    config = json.loads(Path(kube_cluster.kubeconfig).read_text())
    config["users"] = [{"name": "user", "user": {"token": token}}]
    config["contexts"][0]["context"] = {
        "cluster": config["clusters"][0]["name"],
        "user": "user",
        "namespace": ns,
    }
    path = tmp_path / "user.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    rwx = ExperimentVolume(access_mode="ReadWriteMany")
    with pytest.raises(SpecError, match="makes ReadWriteOnce volumes only"):
        check_storage(kube, rwx, "exp-edit")
    with Kube(kubeconfig=path) as user:
        assert user.namespace == ns
        check_storage(user, rwx, "exp-edit")  # cannot look: passes, as before pre-flight


def test_delete_data_is_a_cluster_option(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SURREAL_KUBE_ROOT": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-m", "surreal_kube.cli.main", "delete", "exp-x", "--local", "--delete-data"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr == (
        "error: --delete-data: a cluster option (the data volume); locally the folder goes unless "
        "--keep-files\n"
    )
