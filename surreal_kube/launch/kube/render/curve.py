"""The experiment's CURVE keys on Kubernetes: a Secret `<exp>-curve`, mounted into every pod.

Every role reads its key file from the path in SURREAL_CURVE_KEYS (a path, never the key: see
`comm.curve`) and makes all its sockets CURVE sockets with it, so a pod of the cluster that is not
one of the experiment's, even one inside the NetworkPolicy, is refused at the handshake.

`with_curve_secret` adds to already rendered objects (`objects.render_experiment`'s output): the
Secret, and to every pod template of a Deployment or StatefulSet the Secret's volume (read-only,
0400; the kubelet adds group read for the pod's fsGroup, which is the role's own group), its mount
in every container and the variable. The rendering stays deterministic for a given key: the key
is an argument, generated once per experiment by the caller (`launch.keys.key_file_text`)
and read back from the existing Secret on every later apply or reconcile. The Secret is
`immutable`: an apply that would change the key under running pods is refused by the API server
rather than splitting the experiment into two halves that refuse each other.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from surreal_kube.launch.keys import KEY_FILE
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.render.ownership import owner_reference

KEYS_DIR = "/var/run/secrets/surreal.ai/curve"
KEYS_PATH = f"{KEYS_DIR}/{KEY_FILE}"
KEYS_PATH_VAR = "SURREAL_CURVE_KEYS"
"""As `comm.curve.KEYS_PATH_VAR` (launch may not import comm)."""
VOLUME = "curve"
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


def secret_name(experiment: str) -> str:
    """`<exp>-curve` (one of `names.EXPERIMENT_OBJECTS`, which the name check measures)."""
    return naming.curve_name(experiment)


def curve_secret(
    experiment: str,
    namespace: str,
    key_text: str,
    *,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Secret holding the key file (`launch.keys` format) of `experiment`."""
    metadata: dict[str, Any] = {
        "name": secret_name(experiment),
        "namespace": namespace,
        "labels": dict(labels or naming.labels(experiment)),
    }
    if owner and owner.get("uid"):
        metadata["ownerReferences"] = [owner_reference(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "immutable": True,
        "data": {KEY_FILE: base64.b64encode(key_text.encode()).decode("ascii")},
    }


def mount_keys(pod_spec: dict[str, Any], experiment: str) -> None:
    """Give `pod_spec` (a pod template's `spec`) the Secret's volume, and each of its
    containers the read-only mount and SURREAL_CURVE_KEYS."""
    volumes = pod_spec.setdefault("volumes", [])
    volumes[:] = [v for v in volumes if v.get("name") != VOLUME]
    volumes.append(
        {
            "name": VOLUME,
            "secret": {
                "secretName": secret_name(experiment),
                "defaultMode": 0o400,
                "items": [{"key": KEY_FILE, "path": KEY_FILE}],
            },
        }
    )
    for container in pod_spec.get("initContainers", []) + pod_spec.get("containers", []):
        mounts = container.setdefault("volumeMounts", [])
        mounts[:] = [m for m in mounts if m.get("name") != VOLUME]
        mounts.append({"name": VOLUME, "mountPath": KEYS_DIR, "readOnly": True})
        env = container.setdefault("env", [])
        env[:] = [e for e in env if e.get("name") != KEYS_PATH_VAR]
        env.append({"name": KEYS_PATH_VAR, "value": KEYS_PATH})


def with_curve_mounts(
    objects: Sequence[Mapping[str, Any]], experiment: str
) -> list[dict[str, Any]]:
    """`objects` (copies) with the keys mounted in every workload's pods, no Secret: for the
    operator, which makes the Secret itself (create only) and applies the rest."""
    out = [copy.deepcopy(dict(o)) for o in objects]
    for obj in out:
        if obj.get("kind") in WORKLOAD_KINDS:
            mount_keys(obj["spec"]["template"]["spec"], experiment)
    return out


def with_curve_secret(
    objects: Sequence[Mapping[str, Any]],
    experiment: str,
    namespace: str,
    key_text: str,
    *,
    owner: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """`objects` (unchanged: copies are returned) with the Secret right after the root and the
    keys mounted in every workload's pods."""
    out = with_curve_mounts(objects, experiment)
    root_labels = (out[0].get("metadata") or {}).get("labels") if out else None
    secret = curve_secret(experiment, namespace, key_text, labels=root_labels, owner=owner)
    return [*out[:1], secret, *out[1:]]
