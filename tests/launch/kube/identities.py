"""Test identities on the real API server: a ServiceAccount bound to a ClusterRole in one
namespace, and a token for it (TokenRequest), as a user's kubeconfig would carry it."""

from __future__ import annotations

from surreal_kube.launch.kube.api.client import Kube, resource

SERVICE_ACCOUNT = resource("v1", "ServiceAccount")


def bound_token(kube: Kube, namespace: str, name: str, cluster_role: str) -> str:
    """A token of ServiceAccount `name`, bound in `namespace` to `cluster_role` (view, edit)."""
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}, namespace
    )
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-{cluster_role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        namespace,
    )
    answer = kube.raw(
        "POST",
        SERVICE_ACCOUNT.path(namespace, name, "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])
