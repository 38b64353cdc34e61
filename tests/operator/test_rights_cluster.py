"""The operator acts only within the author's rights, on the test control plane (issue 25, 4).

An Experiment whose `spec.profile` asks for a hostPath volume, and one whose name collides with
an object that is not ours, are refused: the reason in the Experiment's status, nothing applied.
The same collision is refused by `surreal-kube create`, directly and through the operator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, resource
from tests.operator.support import (
    APPLIED_KINDS,
    IMAGE_ARGS,
    TINY,
    connect,
    ensure_crd,
    objects_of,
    profile_file,
    running_operator,
    sk,
    tiny_experiment,
    wait_for,
)

pytestmark = pytest.mark.cluster

CM = resource("v1", "ConfigMap")


@pytest.fixture
def kube(kube_cluster: Any, kube_namespace: str) -> Any:
    k = connect(kube_cluster, kube_namespace)
    ensure_crd(k)
    return k


def applied_false(kube: Any, name: str) -> dict[str, Any]:
    """The Experiment's Applied=False condition, once the operator wrote it."""

    def read() -> dict[str, Any] | None:
        status = (kube.get_or_none(EXPERIMENT, name) or {}).get("status") or {}
        return next(
            (
                c
                for c in status.get("conditions") or []
                if c["type"] == "Applied" and c["status"] == "False"
            ),
            None,
        )

    return wait_for("Applied=False", read)


def an_object(kube: Any, name: str, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """An Experiment as kubectl would apply it, with a `spec.profile` of its author's choice."""
    return kube.apply(tiny_experiment(kube.namespace, name, profile=profile))


def test_a_host_path_experiment_is_refused_by_the_operator_and_nothing_is_made(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-hostpath"
    with running_operator(kube_cluster, ns, tmp_path, "--profile", str(profile_file(tmp_path))):
        an_object(
            kube, name, {"experimentVolume": {"kind": "hostPath", "path": "/var/lib/kubelet"}}
        )
        cond = applied_false(kube, name)
        assert cond["reason"] == "InvalidSpec"
        assert "\n" not in cond["message"]  # one line, naming the keys
        assert "override experimentVolume.kind, experimentVolume.path" in cond["message"]
        assert "it may override: clusterDomain" in cond["message"]
        assert objects_of(kube, name) == []
        # a pool of its own choosing (tolerating whatever it lists) is refused the same way
        kube.delete(EXPERIMENT, name)
        wait_for("gone", lambda: kube.get_or_none(EXPERIMENT, name) is None)
        control_plane = {"key": "node-role.kubernetes.io/control-plane"}
        an_object(
            kube, name, {"runAsUser": 1, "pools": [{"name": "cp", "taints": [control_plane]}]}
        )
        cond = applied_false(kube, name)
        assert "override pools, runAsUser;" in cond["message"], cond["message"]
        assert objects_of(kube, name) == []


def stranger(kube: Any, name: str) -> dict[str, Any]:
    """`<name>-config`, made by hand: no label of ours, no owner."""
    return kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": naming.config_name(name)},
            "data": {"keep": "me"},
        }
    )


def untouched(kube: Any, name: str, before: dict[str, Any]) -> None:
    now = kube.get(CM, naming.config_name(name))
    assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not now["metadata"].get("ownerReferences") and now["data"] == {"keep": "me"}


def test_a_name_that_collides_with_an_object_not_ours_is_refused_at_create_and_by_the_operator(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-taken"
    before = stranger(kube, name)
    profile = str(profile_file(tmp_path))
    args = ["create", name, "-n", ns, "--profile", profile, *IMAGE_ARGS, *TINY]
    # directly: refused before the root is applied
    res = sk(kube_cluster, *args, "--direct")
    assert res.returncode != 0
    line = f"ConfigMap/{naming.config_name(name)} exists and is not ours"
    assert line in res.stderr, res.stderr
    assert objects_of(kube, name) == []
    untouched(kube, name, before)
    with running_operator(kube_cluster, ns, tmp_path, "--profile", profile):
        # kubectl apply of an Experiment: the operator refuses, in its status
        an_object(kube, name)
        cond = applied_false(kube, name)
        assert cond["reason"] == "NotOurs" and line in cond["message"], cond
        assert objects_of(kube, name, APPLIED_KINDS) == []
        untouched(kube, name, before)
        kube.delete(EXPERIMENT, name)
        wait_for("gone", lambda: kube.get_or_none(EXPERIMENT, name) is None)
        # the CLI through the operator hears that refusal and deletes its Experiment again
        res = sk(kube_cluster, *args)
        assert res.returncode != 0
        assert f"the operator cannot apply {name}: " in res.stderr and line in res.stderr
        assert kube.get_or_none(EXPERIMENT, name) is None
        assert objects_of(kube, name) == []
        untouched(kube, name, before)
