"""The operator acts only within the author's rights (issue 25, item 4).

- An Experiment's `spec.profile` may change only the keys the admin's profile allows
  (`experimentMayOverride`); hostPath and NFS volumes only where the admin enables them.
- Applying refuses an existing object of the same kind and name that is not the experiment's,
  before anything is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import Resource, resource
from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.profile import (
    DEFAULT_OVERRIDABLE,
    OVERRIDABLE_KEYS,
    POLICY_KEYS,
    VOLUME_KEYS,
    ClusterProfile,
    ExperimentVolume,
    merge_profiles,
    profile_document,
    profile_from_dict,
)
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.specs import IMAGES

# ---------------------------------------------------------------------------- merge rules


def test_every_profile_key_is_either_overridable_or_the_admins_rule() -> None:
    top = {f.alias for f in ClusterProfile.model_fields.values()}
    assert top == {k for k in OVERRIDABLE_KEYS if "." not in k} | set(POLICY_KEYS)
    assert set(VOLUME_KEYS) == {f.alias for f in ExperimentVolume.model_fields.values()}
    assert set(DEFAULT_OVERRIDABLE) <= set(OVERRIDABLE_KEYS)


@pytest.mark.parametrize(
    ("section", "refused"),
    [
        ({"experimentVolume": {"kind": "hostPath", "path": "/var/lib/kubelet"}}, "experimentVolume.kind"),
        ({"experimentVolume": {"kind": "emptyDir"}}, "experimentVolume.kind"),
        ({"runAsUser": 1}, "runAsUser"),
        ({"pools": [{"name": "control-plane", "taints": [{"key": "node-role.kubernetes.io/control-plane"}]}]}, "pools"),
        ({"poolLabel": "kubernetes.io/hostname"}, "poolLabel"),
        ({"imagePullSecrets": ["someone-elses"]}, "imagePullSecrets"),
        ({"progressReporter": False}, "progressReporter"),
        ({"experimentMayOverride": ["runAsUser"]}, "experimentMayOverride"),
        ({"allowHostPath": True}, "allowHostPath"),
        ({"allowNfs": True}, "allowNfs"),
    ],
)  # fmt: skip
def test_by_default_an_experiment_may_not_override_what_lends_the_operators_rights(
    section: dict[str, Any], refused: str
) -> None:
    with pytest.raises(SpecError) as err:
        merge_profiles(None, section)
    message = str(err.value)
    assert f"override {refused}" in message, message
    assert "it may override: clusterDomain, registry, experimentVolume.size" in message
    assert "\n" not in message


def test_what_an_author_could_choose_anyway_is_allowed_by_default() -> None:
    merged = merge_profiles(
        None,
        {
            "experimentVolume": {
                "size": "50Gi",
                "storageClassName": "fast",
                "accessMode": "ReadWriteMany",
                "retain": False,
                "mountPath": "/data",
            },
            "registry": "example.com/mine",
            "clusterDomain": "corp.local",
        },
    )
    assert merged is not None
    assert merged.experiment_volume.storage_class_name == "fast"
    assert merged.registry == "example.com/mine"


def test_keys_equal_to_the_operators_are_no_override() -> None:
    """`create --profile FILE` writes every key of FILE: those equal to the operator's own, its
    defaults included, must not count, or every CLI create through the operator is refused."""
    admin = profile_from_dict(
        {
            "pools": [{"name": "cpu-pool", "count": 3, "cpu": "8", "memory": "32Gi"}],
            "imagePullSecrets": ["regcred"],
            "experimentVolume": {"kind": "persistentVolumeClaim", "storageClassName": "rwx"},
            "runAsUser": 2000,
        }
    )
    same_file = profile_from_dict(
        {
            "pools": [{"name": "cpu-pool", "count": 3, "cpu": "8", "memory": "32Gi"}],
            "imagePullSecrets": ["regcred"],
            "experimentVolume": {"storageClassName": "other", "size": "20Gi"},
            "runAsUser": 2000,
        }
    )
    document = profile_document(same_file)
    assert not set(POLICY_KEYS) & set(document)  # the admin's rules are never written
    merged = merge_profiles(admin, document)
    assert merged is not None and merged.experiment_volume.storage_class_name == "other"
    assert merged.pools == admin.pools
    assert merge_profiles(None, profile_document(ClusterProfile())) == ClusterProfile()
    # a file without pools means "discover every node's": a change of the admin's pools
    with pytest.raises(SpecError, match=r"override pools, "):
        merge_profiles(admin, profile_document(ClusterProfile()))


def test_the_admin_allows_keys_whole_or_field_by_field() -> None:
    admin = profile_from_dict(
        {"experimentMayOverride": ["imagePullSecrets", "experimentVolume.kind"]}
    )
    merged = merge_profiles(
        admin, {"imagePullSecrets": ["mine"], "experimentVolume": {"kind": "emptyDir"}}
    )
    assert merged is not None and merged.image_pull_secrets == ["mine"]
    with pytest.raises(SpecError, match=r"override runAsUser; it may override: imagePullSecrets"):
        merge_profiles(admin, {"runAsUser": 0 + 1})
    nothing = profile_from_dict({"experimentMayOverride": []})
    with pytest.raises(SpecError, match=r"it may override: nothing"):
        merge_profiles(nothing, {"registry": "r"})
    with pytest.raises(SpecError, match=r"'allowNfs' is not a key an Experiment may override"):
        profile_from_dict({"experimentMayOverride": ["allowNfs"]})


def test_host_path_and_nfs_only_where_the_admin_enables_them() -> None:
    may = {"experimentMayOverride": ["experimentVolume"]}
    host = {"experimentVolume": {"kind": "hostPath", "path": "/srv"}}
    nfs = {"experimentVolume": {"kind": "nfs", "server": "nfs.local", "path": "/x"}}
    with pytest.raises(
        SpecError, match=r"spec\.profile: experimentVolume\.kind hostPath .*allowHostPath"
    ):
        merge_profiles(profile_from_dict(may), host)
    with pytest.raises(SpecError, match=r"experimentVolume\.kind nfs .*allowNfs"):
        merge_profiles(profile_from_dict(may), nfs)
    assert merge_profiles(profile_from_dict({**may, "allowHostPath": True}), host) is not None
    assert merge_profiles(profile_from_dict({**may, "allowNfs": True}), nfs) is not None
    # the admin's own volume too: hostPath in the operator's profile needs allowHostPath
    own = profile_from_dict(host)
    with pytest.raises(SpecError, match=r"the operator's profile: experimentVolume\.kind hostPath"):
        merge_profiles(own, None)
    enabled = profile_from_dict({**host, "allowHostPath": True})
    assert merge_profiles(enabled, None) is enabled


# ---------------------------------------------------------------------------- ownership


def matches(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based label selectors, as the API server reads them (`k!=v` also selects
    objects without k)."""
    for term in selector.split(","):
        if "!=" in term:
            k, v = term.split("!=")
            if labels.get(k) == v:
                return False
        else:
            k, v = term.split("=")
            if labels.get(k) != v:
                return False
    return True


class Store:
    """A namespace's objects: list by label selector, apply records what was applied."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.applied: list[str] = []
        self.lists: list[tuple[str, str]] = []

    def resource_for(self, api_version: str, kind: str) -> Resource:
        return resource(api_version, kind)

    def list(self, res: Resource, namespace: str, labels: str | None = None) -> list[dict]:
        self.lists.append((res.kind, labels or ""))
        return [
            o
            for o in self.objects
            if o["kind"] == res.kind and matches(o["metadata"].get("labels") or {}, labels or "")
        ]

    def apply(self, obj: dict[str, Any], namespace: str, dry_run: bool = False) -> dict:
        self.applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return {**obj, "metadata": {**obj["metadata"], "uid": "root-uid"}}

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        return True


def stranger(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, **meta}}


def test_a_create_over_an_object_that_is_not_ours_is_refused_in_one_line_before_anything() -> None:
    objects = render_experiment(resolve_experiment("metrics"), "rl", images=IMAGES)
    store = Store(
        [
            stranger(
                "ConfigMap",
                "metrics-config",
                managedFields=[{"manager": "kubectl-create"}],
            ),
            stranger("ConfigMap", "unrelated"),
        ]
    )
    with pytest.raises(apply.NotOursError) as err:
        apply.create_objects(store, objects, "rl")
    message = str(err.value)
    assert "ConfigMap/metrics-config exists and is not ours (made by kubectl-create)" in message
    assert "unrelated" not in message and "\n" not in message
    assert store.applied == []  # nothing half-created
    # one list per kind, not a GET per object; our own objects are not what is listed
    kinds = {o["kind"] for o in objects}
    assert len(store.lists) == len(kinds)
    assert {sel for _, sel in store.lists} == {f"{naming.EXPERIMENT_LABEL}!=metrics"}


def test_another_tools_or_another_experiments_object_is_named_with_its_manager() -> None:
    objects = render_experiment(resolve_experiment("metrics"), "rl", images=IMAGES)
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")
    svc = next(o for o in objects if o["kind"] == "Service")
    store = Store(
        [
            stranger(
                "ServiceAccount",
                sa["metadata"]["name"],
                labels={"app.kubernetes.io/managed-by": "Helm"},
            ),
            stranger(
                "Service",
                svc["metadata"]["name"],
                labels={
                    "app.kubernetes.io/managed-by": naming.NAME,
                    naming.EXPERIMENT_LABEL: "other",
                },
            ),
        ]
    )
    with pytest.raises(apply.NotOursError) as err:
        apply.check_ours(store, objects, "rl", "metrics")
    message = str(err.value)
    assert f"ServiceAccount/{sa['metadata']['name']} exists and is not ours (managed by Helm)" in (
        message
    )
    assert f"Service/{svc['metadata']['name']} exists and is not ours (experiment 'other')" in (
        message
    )


def test_the_operator_refuses_an_object_labelled_ours_that_another_owner_owns() -> None:
    objects = render_experiment(resolve_experiment("metrics"), "rl", images=IMAGES)
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    svc = next(o for o in objects if o["kind"] == "Service")
    labels = dict(cm["metadata"]["labels"])
    store = Store(
        [
            stranger(
                "ConfigMap",
                cm["metadata"]["name"],
                labels=labels,
                ownerReferences=[{"kind": "ConfigMap", "name": "x", "uid": "someone-else"}],
            ),
            stranger(  # ours already: owned by this Experiment
                "Service",
                svc["metadata"]["name"],
                labels=labels,
                ownerReferences=[{"kind": "Experiment", "name": "metrics", "uid": "mine"}],
            ),
            stranger("PersistentVolumeClaim", "metrics-data", labels=labels),  # a kept claim
        ]
    )
    with pytest.raises(apply.NotOursError) as err:
        apply.check_ours(store, objects, "rl", "metrics", owner_uid="mine")
    message = str(err.value)
    assert f"ConfigMap/{cm['metadata']['name']} exists and is not ours (owned by ConfigMap/x)" in (
        message
    )
    assert "Service/" not in message and "PersistentVolumeClaim" not in message
    store.objects = store.objects[1:]
    apply.check_ours(store, objects, "rl", "metrics", owner_uid="mine")  # no error


def test_the_charts_schema_lists_the_keys_an_admin_may_allow() -> None:
    import json
    from pathlib import Path

    chart = Path(__file__).resolve().parents[3] / "charts" / "surreal-kube" / "values.schema.json"
    profile = json.loads(chart.read_text())["properties"]["profile"]["properties"]
    assert profile["experimentMayOverride"]["items"]["enum"] == list(OVERRIDABLE_KEYS)
    assert profile["allowHostPath"] == profile["allowNfs"] == {"type": "boolean"}
