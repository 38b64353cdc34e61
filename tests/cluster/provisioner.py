"""A small dynamic volume provisioner for the test cluster, like kind's local-path provisioner.

The test control plane (controlplane.py) creates the default StorageClass `standard`
(provisioner PROVISIONER, ReadWriteOnce volumes, volumeBindingMode WaitForFirstConsumer) and runs
this as one of its processes, so a claim there behaves as on kind or GKE's standard-rwo: it waits
for its first pod, the scheduler picks the node and writes `volume.kubernetes.io/selected-node`
on the claim, and then this:

- creates a PersistentVolume for each such ReadWriteOnce claim of a class of ours (a claim asking
  for ReadWriteMany stays Pending, as local-path and block disks leave it): a hostPath volume under
  `--root` (the cluster's own folder), with a nodeAffinity to that node, the claim's size and
  access modes, a claimRef to the claim and the class's reclaim policy (Delete by default). The
  real kube-controller-manager's PV binder binds the two, and the scheduler then binds the pod;
- makes that folder, mode 0777, on nodes that run containers (not kwok's simulated ones): pods
  run as uid 10001 and kubelet does not chown a hostPath for fsGroup. The real node shares the
  host's filesystem (only its network is a namespace of its own), so the folder is the pod's;
- deletes Released volumes it made whose policy is Delete, and their folders.

It watches claims and volumes (two watch streams, through the standard library only: no client
library to import) and reconciles from a fresh list after each change, and every RESYNC seconds.
It stops on SIGTERM; the control plane removes `--root` with its work directory.

    python tests/cluster/provisioner.py --server URL --pki DIR --root DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import ssl
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

PROVISIONER = "surreal-kube.dev/test-local"
CLASS_NAME = "standard"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
RESYNC = 10.0

log = logging.getLogger("provisioner")


def storage_class() -> dict[str, Any]:
    """The cluster's default StorageClass, served by this provisioner."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": CLASS_NAME,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


class Api:
    """JSON requests to the API server with the admin client certificate."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    def watch(self, path: str, stop: threading.Event, changed: threading.Event) -> None:
        """Set `changed` on every event of the watch of `path`, until `stop` (restarting)."""
        query = urllib.parse.urlencode({"watch": "1", "timeoutSeconds": "60"})
        while not stop.is_set():
            try:
                req = urllib.request.Request(f"{self.server}{path}?{query}")
                with urllib.request.urlopen(req, context=self.ctx, timeout=90) as resp:
                    for line in resp:
                        if stop.is_set():
                            return
                        if line.strip():
                            changed.set()
            except (OSError, ValueError) as exc:
                log.info("watch %s: %s; again", path, exc)
                if stop.wait(1.0):
                    return


class Provisioner:
    """The reconcile step (see the module docstring)."""

    def __init__(self, api: Api, root: Path) -> None:
        self.api = api
        self.root = root

    def reconcile(self) -> None:
        classes = {
            c["metadata"]["name"]: c
            for c in self.api.request("GET", "/apis/storage.k8s.io/v1/storageclasses")["items"]
            if c.get("provisioner") == PROVISIONER
        }
        volumes = self.api.request("GET", "/api/v1/persistentvolumes")["items"]
        made = {v["metadata"]["name"] for v in volumes}
        for claim in self.api.request("GET", "/api/v1/persistentvolumeclaims")["items"]:
            cls = classes.get(claim["spec"].get("storageClassName") or "")
            node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
            if cls is None or node is None or claim["spec"].get("volumeName"):
                continue
            if (claim.get("status") or {}).get("phase") != "Pending":
                continue
            modes = set(claim["spec"].get("accessModes") or ["ReadWriteOnce"])
            if modes - {"ReadWriteOnce", "ReadWriteOncePod"}:
                # like local-path: a node's folder cannot be shared by nodes; the claim stays
                # Pending, as it would on kind or GKE's standard-rwo
                log.warning("claim %s/%s: only ReadWriteOnce, not %s", *_ns_name(claim), modes)
                continue
            name = f"pvc-{claim['metadata']['uid']}"
            if name not in made:
                self.provision(claim, cls, node, name)
        for volume in volumes:
            meta, spec = volume["metadata"], volume["spec"]
            if (meta.get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER:
                continue
            phase = (volume.get("status") or {}).get("phase")
            if (
                phase in ("Released", "Failed")
                and spec.get("persistentVolumeReclaimPolicy") == "Delete"
            ):
                self.remove(volume)

    def provision(self, claim: dict[str, Any], cls: dict[str, Any], node: str, name: str) -> None:
        meta = claim["metadata"]
        path = self.root / name
        try:
            node_obj = self.api.request("GET", f"/api/v1/nodes/{urllib.parse.quote(node)}")
        except urllib.error.HTTPError as exc:
            log.warning("claim %s/%s: node %s: %s", meta["namespace"], meta["name"], node, exc)
            return
        node_meta = node_obj["metadata"]
        simulated = (node_meta.get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake"
        if not simulated:
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o777)  # not through mkdir's mode: the umask would take bits away
        hostname = (node_meta.get("labels") or {}).get("kubernetes.io/hostname", node)
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "annotations": {PROVISIONED_BY: PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
                "accessModes": list(claim["spec"].get("accessModes") or ["ReadWriteOnce"]),
                "volumeMode": claim["spec"].get("volumeMode") or "Filesystem",
                "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
                "storageClassName": cls["metadata"]["name"],
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "hostPath": {"path": str(path)},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [hostname],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
        try:
            self.api.request("POST", "/api/v1/persistentvolumes", volume)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # made by an earlier pass: fine
                raise
        log.info("claim %s/%s: volume %s on %s", meta["namespace"], meta["name"], name, node)

    def remove(self, volume: dict[str, Any]) -> None:
        name = volume["metadata"]["name"]
        path = Path((volume["spec"].get("hostPath") or {}).get("path") or "")
        if path.parent == self.root:  # only folders of ours
            shutil.rmtree(path, ignore_errors=True)
        try:
            self.api.request("DELETE", f"/api/v1/persistentvolumes/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        log.info("volume %s released: deleted with its folder", name)


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def run(server: str, pki: Path, root: Path) -> None:
    """Reconcile after every change of a claim or volume until SIGTERM."""
    api = Api(server, pki)
    root.mkdir(parents=True, exist_ok=True)
    prov = Provisioner(api, root)
    stop, changed = threading.Event(), threading.Event()

    def on_term(*_: object) -> None:
        stop.set()
        changed.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    for path in ("/api/v1/persistentvolumeclaims", "/api/v1/persistentvolumes"):
        threading.Thread(target=api.watch, args=(path, stop, changed), daemon=True).start()
    while not stop.is_set():
        changed.clear()
        try:
            prov.reconcile()
        except (OSError, ValueError, KeyError) as exc:
            log.warning("reconcile: %s; again", exc)
            stop.wait(0.5)
            changed.set()  # try again soon
        changed.wait(RESYNC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--pki", required=True, type=Path, help="ca.crt, admin.crt, admin.key")
    parser.add_argument("--root", required=True, type=Path, help="folder for the volumes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.server, args.pki, args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
