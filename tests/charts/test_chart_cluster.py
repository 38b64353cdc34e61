"""`helm install` into the test control plane, and the operator running as the chart's
ServiceAccount: it can do its job with exactly that role, and the real API server refuses it
everything else."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import (
    CRD,
    EXPERIMENT,
    ForbiddenError,
    Kube,
    NotFoundError,
    resource,
)
from surreal_kube.launch.kube.render import crd
from surreal_kube.operator import rbac
from tests.charts.helm import CHART, helm
from tests.operator.support import (
    IMAGES,
    connect,
    objects_of,
    profile_file,
    running_operator,
    running_pods,
    wait_for,
)

pytestmark = pytest.mark.cluster

SA = resource("v1", "ServiceAccount")
CLUSTER_ROLE = resource("rbac.authorization.k8s.io/v1", "ClusterRole")
CLUSTER_BINDING = resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
ROLE_BINDING = resource("rbac.authorization.k8s.io/v1", "RoleBinding")
DEPLOY = resource("apps/v1", "Deployment")
SECRET = resource("v1", "Secret")
POD = resource("v1", "Pod")
TINY = {
    c: {"cpu": "10m", "memory": "16Mi"}
    for c in ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
}


def token_kubeconfig(admin: Kube, cluster: Any, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token)."""
    answer = admin.raw(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    config = json.loads(Path(cluster.kubeconfig).read_text())
    config["users"] = [{"name": account, "user": {"token": answer["status"]["token"]}}]
    config["contexts"] = [
        {
            "name": "sa",
            "context": {
                "cluster": config["clusters"][0]["name"],
                "user": account,
                "namespace": namespace,
            },
        }
    ]
    config["current-context"] = "sa"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def test_helm_install_and_the_operator_as_its_service_account(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    release = f"sk-{uuid.uuid4().hex[:6]}"
    admin = connect(kube_cluster, ns)
    env = {**os.environ, **kube_cluster.env()}

    # helm installs the CRD from crds/ only when it is absent: make it absent if nothing uses it
    crd_existed = admin.get_or_none(CRD, crd.CRD_NAME) is not None
    if crd_existed and not admin.list(EXPERIMENT, all_namespaces=True):
        admin.delete(CRD, crd.CRD_NAME)
        wait_for("the CRD to go", lambda: admin.get_or_none(CRD, crd.CRD_NAME) is None)
        crd_existed = False

    spec = {
        "exp-helm": {
            "agents": {"count": 2},
            "evals": {"count": 1},
            "resources": TINY,
            "images": {k: {"image": v} for k, v in IMAGES.items()},
        }
    }
    done = helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        ns,
        "--wait",
        "--timeout",
        "120s",
        "--set",
        "image.tag=0.1.0-test",
        "--set-json",
        f"experiments={json.dumps(spec)}",
        env=env,
    )
    assert f"surreal-kube 0.1.0 is installed as release {release} in namespace {ns}." in done.stdout
    assert f"surreal-kube create exp-ppo-ant --namespace {ns}" in done.stdout
    assert "This release created: exp-helm." in done.stdout
    try:
        # CRD, RBAC and the operator's objects
        definition = admin.get(CRD, crd.CRD_NAME)
        assert (
            definition["spec"]["versions"][0]["schema"]
            == crd.experiment_crd()["spec"]["versions"][0]["schema"]
        )
        if not crd_existed:  # helm created it (with its own client as field manager)
            managers = {f["manager"] for f in definition["metadata"].get("managedFields", [])}
            assert managers and "surreal-kube-tests" not in managers, managers
        full = f"{release}-surreal-kube"
        assert admin.get(SA, full)
        assert admin.get(CLUSTER_ROLE, full)["rules"] == rbac.RULES
        assert admin.get(CLUSTER_ROLE, f"{full}-nodes")
        assert admin.get(CLUSTER_BINDING, f"{full}-nodes")["subjects"][0]["name"] == full
        assert admin.get(ROLE_BINDING, full)["roleRef"]["name"] == full
        deploy = admin.get(DEPLOY, full)
        assert deploy["status"].get("availableReplicas") == 2  # kwok runs its pods
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "surreal-kube/runtime-cpu:0.1.0-test"
        assert admin.get(EXPERIMENT, "exp-helm")["spec"]["agents"]["count"] == 2

        # the operator, with nothing but the ServiceAccount's token, does the whole job
        kubeconfig = token_kubeconfig(admin, kube_cluster, ns, full, tmp_path / "sa.kubeconfig")
        with running_operator(
            kube_cluster,
            ns,
            tmp_path,
            "--profile",
            str(profile_file(tmp_path)),
            "--leader-elect",  # as the chart runs it: the Lease is within the role too
            kubeconfig=kubeconfig,
        ) as op:
            st = wait_for(
                "exp-helm Running",
                lambda: (
                    (admin.get(EXPERIMENT, "exp-helm").get("status") or {}).get("phase")
                    == "Running"
                ),
                timeout=90,
            )
            assert st
            assert len(running_pods(admin, "exp-helm", "agents")) == 2
            assert "403" not in op.tail(200) and "Forbidden" not in op.tail(200), op.tail(200)
            assert "holds lease" in op.tail(200), op.tail(200)

        # ... and the real API server refuses it what its role does not grant
        sa = Kube(kubeconfig=kubeconfig)
        assert sa.namespace == ns
        assert sa.list(resource("v1", "Pod"))  # allowed: pods in its namespace
        other = kube_cluster.create_namespace("t-other")
        try:
            admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "s"},
                    "stringData": {"k": "v"},
                },
                other,
            )
            with pytest.raises(ForbiddenError) as refused:
                sa.get(SECRET, "s", other)
            assert f'User "system:serviceaccount:{ns}:{full}" cannot get resource "secrets"' in str(
                refused.value
            )
            assert refused.value.status == 403
            with pytest.raises(ForbiddenError):
                sa.list(SECRET)  # not even in its own namespace
            with pytest.raises(ForbiddenError):
                sa.list(resource("v1", "Pod"), other)  # nor pods where it does not watch
            with pytest.raises(ForbiddenError):
                sa.create(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "p"},
                        "spec": {"containers": [{"name": "c", "image": "i"}]},
                    }
                )  # pods: read-only
            with pytest.raises(ForbiddenError):
                sa.delete(CLUSTER_ROLE, full, missing_ok=False)
        finally:
            kube_cluster.delete_namespace(other)
    finally:
        helm("uninstall", release, "--namespace", ns, "--wait", env=env)
    with pytest.raises(NotFoundError):
        admin.get(CLUSTER_ROLE, f"{release}-surreal-kube")
    # the Experiment from the values went with the release, its objects through ownership
    wait_for("exp-helm's objects to go", lambda: objects_of(admin, "exp-helm") == [], timeout=90)
    assert admin.get(CRD, crd.CRD_NAME)  # helm keeps CRDs: other experiments may use it
