"""Our kubeconfig reader against the real API server: each way to prove who we are is accepted,
TLS is checked by the name the cluster entry says, and a refused exec credential is renewed once.
"""

from __future__ import annotations

import base64
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.launch.kube.api.client import NODE, Kube, KubeError, UnreachableError, resource
from tests.launch.kube.identities import SERVICE_ACCOUNT, bound_token

pytestmark = pytest.mark.cluster

CONFIG_MAP = resource("v1", "ConfigMap")


def admin_parts(kube_cluster: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The test cluster's (cluster, user) entries of its kubeconfig."""
    doc = json.loads(Path(kube_cluster.kubeconfig).read_text())
    return doc["clusters"][0]["cluster"], doc["users"][0]["user"]


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


@pytest.fixture
def reader_token(kube_cluster: Any, kube_namespace: str) -> str:
    """A ServiceAccount token that may read its namespace (the `view` ClusterRole)."""
    with Kube(kubeconfig=kube_cluster.kubeconfig) as admin:
        return bound_token(admin, kube_namespace, "r", "view")


def test_client_certificate_files_relative_to_the_kubeconfig(
    kube_cluster: Any, tmp_path: Path
) -> None:
    cluster, user = admin_parts(kube_cluster)
    pki = tmp_path / "conf" / "pki"
    pki.mkdir(parents=True)
    (pki / "ca.crt").write_bytes(base64.b64decode(cluster.pop("certificate-authority-data")))
    cluster["certificate-authority"] = "pki/ca.crt"
    (pki / "me.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
    (pki / "me.key").write_bytes(base64.b64decode(user["client-key-data"]))
    path = kubeconfig(
        tmp_path / "conf" / "config",
        cluster,
        {"client-certificate": "pki/me.crt", "client-key": "pki/me.key"},
    )
    with Kube(kubeconfig=path) as kube:
        assert kube.list(NODE)
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["conf", "config", "pki", "ca.crt", "me.crt", "me.key"]
    )  # the key was loaded from memory's private copy, and that copy is gone


def test_tls_is_checked_against_tls_server_name(kube_cluster: Any, tmp_path: Path) -> None:
    cluster, user = admin_parts(kube_cluster)
    good = kubeconfig(tmp_path / "good", {**cluster, "tls-server-name": "kubernetes"}, user)
    with Kube(kubeconfig=good) as kube:
        assert kube.raw("GET", "/version")["gitVersion"].startswith("v1.")
    bad = kubeconfig(tmp_path / "bad", {**cluster, "tls-server-name": "not-the-server"}, user)
    with Kube(kubeconfig=bad) as kube, pytest.raises(UnreachableError) as err:
        kube.raw("GET", "/version")
    assert "TLS" in str(err.value) and "\n" not in str(err.value)
    no_ca = {k: v for k, v in cluster.items() if k != "certificate-authority-data"}
    unknown = kubeconfig(tmp_path / "no-ca", no_ca, user)  # the system's CAs do not know it
    with Kube(kubeconfig=unknown) as kube, pytest.raises(UnreachableError, match="TLS"):
        kube.raw("GET", "/version")
    insecure = kubeconfig(tmp_path / "insecure", {**no_ca, "insecure-skip-tls-verify": True}, user)
    with Kube(kubeconfig=insecure) as kube:
        assert kube.raw("GET", "/version")["gitVersion"].startswith("v1.")


def test_token_and_token_file(
    kube_cluster: Any, kube_namespace: str, reader_token: str, tmp_path: Path
) -> None:
    cluster, _ = admin_parts(kube_cluster)
    token_file = tmp_path / "token"
    token_file.write_text(reader_token)
    for user in ({"token": reader_token}, {"tokenFile": str(token_file)}):
        path = kubeconfig(tmp_path / "config", cluster, user)
        with Kube(kubeconfig=path, namespace=kube_namespace) as kube:
            assert [sa["metadata"]["name"] for sa in kube.list(SERVICE_ACCOUNT)] == ["default", "r"]
            with pytest.raises(KubeError) as err:  # `view` reads no nodes
                kube.list(NODE)
            assert err.value.status == 403


def test_exec_plugin_renewed_once_when_refused(
    kube_cluster: Any, kube_namespace: str, reader_token: str, tmp_path: Path
) -> None:
    """The first credential is refused (401): the plugin runs again and the request goes through
    with the second, as kubectl does with an exec credential the server no longer accepts."""
    cluster, _ = admin_parts(kube_cluster)
    (tmp_path / "good").write_text(reader_token)
    script = tmp_path / "plugin.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, pathlib\n"
        "here = pathlib.Path(__file__).parent\n"
        "runs = here / 'runs'\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "token = 'expired-token' if n == 1 else (here / 'good').read_text()\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "                  'status': {'token': token}}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}
    path = kubeconfig(tmp_path / "config", cluster, user)
    with Kube(kubeconfig=path, namespace=kube_namespace) as kube:
        assert len(kube.list(SERVICE_ACCOUNT)) == 2
        assert "kube-root-ca.crt" in {c["metadata"]["name"] for c in kube.list(CONFIG_MAP)}
    assert (tmp_path / "runs").read_text() == "2"  # once refused, once renewed, then kept
