"""The test cluster's default StorageClass on the real node: a claim of class `standard` gets a
folder (tests/cluster/provisioner.py) that a pod running as uid 10001, like every experiment
container, can write, and what it wrote is still there once the pod is gone; deleting the claim
removes the volume and its folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import Resource, resource
from tests.cluster import node
from tests.node.support import POD, finished_log, real_pod, wait_finished, wait_for
from tests.operator.support import connect as kube_for

pytestmark = [pytest.mark.cluster, pytest.mark.node]

CLAIM = resource("v1", "PersistentVolumeClaim")
VOLUME = Resource("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
UID = 10001


def writer(name: str, command: str, claim: str) -> dict[str, Any]:
    pod = real_pod(name, ["sh", "-c", command])
    pod["spec"]["securityContext"] = {"runAsUser": UID, "runAsGroup": UID, "fsGroup": UID}
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return pod


def test_a_claim_of_the_default_class_keeps_what_uid_10001_wrote(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    kube = kube_for(kube_cluster, kube_namespace)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    kube.create(writer("write", "id -u > /data/who && echo kept > /data/note", "data"))
    assert wait_finished(kube, "write") == "Succeeded", finished_log(kube, "write")
    claim = kube.get(CLAIM, "data", kube_namespace)
    assert claim["spec"]["storageClassName"] == "standard"  # the default, filled in on create
    assert claim["status"]["phase"] == "Bound"
    pv = kube.get(VOLUME, claim["spec"]["volumeName"])
    folder = Path(pv["spec"]["hostPath"]["path"])
    assert folder.parent == kube_cluster.control_plane.volumes_dir
    kube.delete(POD, "write", kube_namespace)
    wait_for("the writer gone", lambda: kube.get_or_none(POD, "write", kube_namespace) is None)

    # the node shares the host's filesystem: the folder is the volume
    assert (folder / "note").read_text() == "kept\n"
    assert os.stat(folder / "note").st_uid == UID
    assert (folder / "who").read_text() == f"{UID}\n"
    # and a later pod on the node sees it through the claim
    kube.create(writer("read", "cat /data/note", "data"))
    assert wait_finished(kube, "read") == "Succeeded"
    assert finished_log(kube, "read") == "kept\n"
    assert kube.get(POD, "read", kube_namespace)["spec"]["nodeName"] == node.NODE_NAME
    kube.delete(POD, "read", kube_namespace)
    wait_for("the reader gone", lambda: kube.get_or_none(POD, "read", kube_namespace) is None)

    # reclaim policy Delete: the claim goes, the volume and its folder go with it
    kube.delete(CLAIM, "data", kube_namespace)
    wait_for("the volume deleted", lambda: kube.get_or_none(VOLUME, pv["metadata"]["name"]) is None)
    assert not folder.exists()
