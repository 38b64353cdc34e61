"""Acting as an experiment's progress reporter from the test machine: a token of its
ServiceAccount (TokenRequest API), the cluster CA and the namespace in a folder, as the projected
volume gives them to the tensorplex container, and the in-cluster environment that points at the
test API server."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from surreal_kube.experiment import progress
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import resource
from surreal_kube.runtime.reporter import ConfigMapWriter

SERVICE_ACCOUNT = resource("v1", "ServiceAccount")


def reporter_secrets(cluster: Any, kube: Any, name: str, namespace: str, folder: Path) -> Path:
    """The folder SURREAL_REPORTER_DIR names: token, ca.crt, namespace."""
    answer = kube.raw(
        "POST",
        SERVICE_ACCOUNT.path(namespace, naming.reporter_name(name), "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        what="request a token",
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(answer["status"]["token"])
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
    (folder / "ca.crt").write_bytes(base64.b64decode(ca))
    (folder / "namespace").write_text(namespace)
    return folder


def in_cluster_env(cluster: Any, name: str, folder: Path) -> dict[str, str]:
    """What the tensorplex container's environment says, pointing at the test API server."""
    server = urlsplit(cluster.server)
    return {
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "SURREAL_PROGRESS_CONFIGMAP": naming.progress_name(name),
        "SURREAL_REPORTER_DIR": str(folder),
    }


def writer_for(cluster: Any, name: str, folder: Path, configmap: str | None = None) -> Any:
    """The reporter's writer, aimed at `configmap` (default: the experiment's own)."""
    env = in_cluster_env(cluster, name, folder)
    namespace = (folder / "namespace").read_text()
    return ConfigMapWriter(
        env["KUBERNETES_SERVICE_HOST"],
        int(env["KUBERNETES_SERVICE_PORT"]),
        namespace,
        configmap or naming.progress_name(name),
        folder,
    )


def write_progress(
    cluster: Any, kube: Any, name: str, namespace: str, tmp: Path, record: progress.Record
) -> None:
    """Write `record` into the experiment's progress ConfigMap with the reporter's own token."""
    folder = reporter_secrets(cluster, kube, name, namespace, tmp / f"reporter-{name}")
    writer_for(cluster, name, folder).write(record.to_json())
