"""The experiment volume on a live cluster: can its StorageClass serve the claim, and its fate.

Pre-flight (`check_storage`, called where placement is checked, before anything is created): a
claim on a class that does not exist, or on no class when the cluster has no default, stays
Pending, and so does every pod that mounts it, with nothing but an event to say why. A
ReadWriteMany claim on a class whose provisioner only makes ReadWriteOnce disks (GKE's
standard-rwo, EBS, kind's local-path...) stays Pending too. Those are refused here in one line
that names the class, its provisioner and what would work. A provisioner not listed below
passes: we cannot know what it serves, and ReadWriteOnce (the default) is what every one serves.
Credentials that may not read StorageClasses (the namespaced `edit` role cannot) skip the check.

A new experiment whose name still has a claim kept from an earlier run is refused too
(`check_kept_claim`), as a local experiment's folder is: it would mix the two runs' data.

After `delete` (`settle_data`): the claim is kept unless the user asks (`delete --delete-data`)
or the profile said `retain: false` (then it was owned by the root and goes with it), and the
words say which, with the command that removes a kept claim.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import ForbiddenError, Kube, Resource, resource
from surreal_kube.launch.kube.naming import is_retained
from surreal_kube.launch.kube.profile import ExperimentVolume

log = logging.getLogger(__name__)

STORAGE_CLASS = Resource("storage.k8s.io/v1", "StorageClass", "storageclasses", namespaced=False)
CLAIM = resource("v1", "PersistentVolumeClaim")
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
RWO_ONLY_PROVISIONERS = frozenset(
    {
        "pd.csi.storage.gke.io",
        "kubernetes.io/gce-pd",
        "rancher.io/local-path",
        "ebs.csi.aws.com",
        "kubernetes.io/aws-ebs",
        "disk.csi.azure.com",
        "kubernetes.io/azure-disk",
        "cinder.csi.openstack.org",
        "kubernetes.io/cinder",
        "dobs.csi.digitalocean.com",
        "linodebs.csi.linode.com",
        "topolvm.io",
        "kubernetes.io/no-provisioner",
        "surreal-kube.dev/test-local",
    }
)
"""Provisioners whose volumes attach to one node at a time (block disks, node-local paths).
`surreal-kube.dev/test-local` is the test cluster's own (tests/cluster/provisioner.py)."""
RWX_ADVICE = (
    "a class of filestore.csi.storage.gke.io (GKE Filestore) or of an NFS provisioner "
    "(accessMode: ReadWriteMany), kind: nfs with a share's server and path, or accessMode: "
    "ReadWriteOnce (the default: the pods that use the folder share the learner's node)"
)


def check_storage(kube: Kube, volume: ExperimentVolume, experiment: str) -> None:
    """Refuse (SpecError, exit 2) a claim the cluster's StorageClasses cannot serve.

    See the module docstring; nothing is created either way.
    """
    if volume.kind != "persistentVolumeClaim" or volume.storage_class_name == "":
        return  # "" binds to pre-made volumes of no class: nothing to check against
    try:
        classes = kube.list(STORAGE_CLASS)
    except ForbiddenError as exc:
        log.info("cannot read StorageClasses (%s): the claim's class is not checked", exc)
        return
    by_name = {c["metadata"]["name"]: c for c in classes}
    defaults = sorted(name for name, c in by_name.items() if _is_default(c))
    listed = _listing(by_name, defaults)
    claim = naming.data_name(experiment)
    if volume.storage_class_name is None:
        if not defaults:
            raise SpecError(
                f"experimentVolume: the cluster has no default StorageClass ({listed}), so the "
                f"claim {claim} would stay Pending and with it every pod that mounts it: set "
                "experimentVolume.storageClassName in the profile, or kind: nfs"
            )
        name = defaults[0]
    else:
        name = volume.storage_class_name
        if name not in by_name:
            raise SpecError(
                f"experimentVolume.storageClassName: no StorageClass {name!r} in the cluster "
                f"({listed}): the claim {claim} would stay Pending"
            )
    provisioner = str(by_name[name].get("provisioner") or "")
    if volume.access_mode == "ReadWriteMany" and provisioner in RWO_ONLY_PROVISIONERS:
        raise SpecError(
            f"experimentVolume.accessMode: ReadWriteMany on StorageClass {name!r}, whose "
            f"provisioner {provisioner} makes ReadWriteOnce volumes only: the claim {claim} "
            f"would stay Pending; use {RWX_ADVICE}"
        )


def check_kept_claim(kube: Kube, experiment: str, namespace: str) -> None:
    """Refuse (LaunchError) a new experiment whose name has a claim kept from an earlier run.

    Its pods would mix the old run's checkpoints, events and results with theirs (the learner
    would resume from the old checkpoint), and a create that fails part-way deletes what it
    applied, the old claim with it. Like a local experiment's folder, it must be removed first.
    When the experiment itself still exists this says nothing: `create` refuses that as such.
    """
    from surreal_kube.launch.kube.api.client import EXPERIMENT

    name = naming.data_name(experiment)
    claim = kube.get_or_none(CLAIM, name, namespace)
    labels = ((claim or {}).get("metadata") or {}).get("labels") or {}
    if claim is None or labels.get(naming.EXPERIMENT_LABEL) != experiment:
        return
    config = resource("v1", "ConfigMap")
    if kube.get_or_none(config, naming.config_name(experiment), namespace) is not None:
        return
    if kube.has_experiment_crd() and kube.get_or_none(EXPERIMENT, experiment, namespace):
        return
    raise LaunchError(
        f"the data of an earlier {experiment} is still in PersistentVolumeClaim {name} "
        f"(delete keeps it): remove it first with `kubectl delete pvc {name} -n {namespace}`, "
        "or use another name"
    )


def _is_default(storage_class: Mapping[str, Any]) -> bool:
    annotations = (storage_class.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(k) == "true" for k in DEFAULT_CLASS_ANNOTATIONS)


def _listing(by_name: Mapping[str, Any], defaults: list[str]) -> str:
    if not by_name:
        return "it has none"
    names = ", ".join(sorted(by_name))
    return f"classes: {names}" + (f"; default: {defaults[0]}" if defaults else "")


def settle_data(kube: Kube, experiment: str, namespace: str, *, delete_data: bool) -> str | None:
    """What became of the experiment's data after its root was deleted, in words for `delete`.

    delete_data: remove a kept claim too. A claim without the retain annotation is owned by the
    root and goes with it. None when there is no claim (an NFS share or a node's path keeps its
    folder, an emptyDir had nothing to keep): nothing to say that delete knows.
    """
    name = naming.data_name(experiment)
    claim = kube.get_or_none(CLAIM, name, namespace)
    labels = ((claim or {}).get("metadata") or {}).get("labels") or {}
    if claim is None or labels.get(naming.EXPERIMENT_LABEL) != experiment:
        return None
    if delete_data or not is_retained(claim):
        if delete_data:
            kube.delete(CLAIM, name, namespace, propagation="Background")
        return f"data removed (PersistentVolumeClaim {name} deleted)"
    return (
        f"data kept in PersistentVolumeClaim {name}; remove it with "
        f"`kubectl delete pvc {name} -n {namespace}`"
    )
