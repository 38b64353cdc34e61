"""The experiment's CURVE keys at apply time: made once, read back on every later apply.

The rendering never holds a key (`render` and `create --dry-run` print none): the key Secret and
its mounts (`render/curve.py`) are added to the objects only on their way to the API server. The
key is made when the experiment is created and read back from its Secret on every later apply
(a scale, the operator's reconcile or resync), so every pod of one experiment holds the same key.

The operator's rights on Secrets are `get` and `create` only (operator/rbac.py): it makes the
Secret with a plain create, never lists, patches or deletes one (ownership by the `Experiment`
deletes it), and applies only the mounts with the other objects.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from surreal_kube.launch.keys import KEY_FILE, key_file_text
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import ConflictError, Kube, resource
from surreal_kube.launch.kube.render.curve import (
    curve_secret,
    secret_name,
    with_curve_mounts,
    with_curve_secret,
)

__all__ = ["existing_key", "key_file_text", "keyed", "keyed_by_operator"]

SECRET = resource("v1", "Secret")


def existing_key(kube: Kube, experiment: str, namespace: str) -> str | None:
    """The key file text in the experiment's Secret, or None when it has none yet."""
    live = kube.get_or_none(SECRET, secret_name(experiment), namespace)
    data = ((live or {}).get("data") or {}).get(KEY_FILE)
    return base64.b64decode(data).decode() if data else None


def keyed(
    objects: Sequence[Mapping[str, Any]], experiment: str, namespace: str
) -> list[dict[str, Any]]:
    """A new experiment's objects with a fresh key's Secret after the root and the keys mounted
    in every pod: what `create` applies (the root then owns the Secret like the rest)."""
    return with_curve_secret(objects, experiment, namespace, key_file_text())


def keyed_by_operator(
    kube: Kube,
    objects: Sequence[Mapping[str, Any]],
    experiment: str,
    namespace: str,
    owner: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The operator's objects with the keys mounted; the Secret made first when missing
    (owned by the `Experiment`), with a create: a concurrent reconcile's key wins."""
    if existing_key(kube, experiment, namespace) is None:
        secret = curve_secret(
            experiment, namespace, key_file_text(), labels=naming.labels(experiment), owner=owner
        )
        # made meanwhile by another reconcile: its key is the experiment's
        with contextlib.suppress(ConflictError):
            kube.create(secret, namespace)
    return with_curve_mounts(objects, experiment)
