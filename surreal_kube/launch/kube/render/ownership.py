"""One root object owns everything an experiment renders, so one delete removes it all.

The root is the `Experiment` custom resource when the operator's CRD is installed, else the
ConfigMap holding the resolved spec (the first rendered object). An ownerReference needs the
root's `uid`, which only exists once the root is on the server. So:

- `render_experiment(..., owner={apiVersion, kind, name, uid})` writes the references directly;
- with no uid known at render time (client-side render, or the ConfigMap root), objects are
  rendered without references; whoever applies them creates the root first, reads its uid from
  the server's answer and calls `set_owner(objects, {..., "uid": uid})` before applying the rest.

An object annotated `surreal.ai/retain: "true"` (the experiment volume, when the profile says
to retain it) is never owned, so it survives the experiment's deletion.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.launch.kube.naming import is_retained

OWNER_KEYS = ("apiVersion", "kind", "name", "uid")


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference to `owner` ({apiVersion, kind, name, uid}); the owner controls it."""
    missing = [k for k in OWNER_KEYS if not owner.get(k)]
    if missing:
        raise LaunchError(f"owner {dict(owner)!r} lacks {', '.join(missing)}")
    ref: dict[str, Any] = {k: str(owner[k]) for k in OWNER_KEYS}
    ref.update(controller=True, blockOwnerDeletion=True)
    return ref


def is_same(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """True if `obj` is the owner itself (an object cannot own itself)."""
    meta = obj.get("metadata") or {}
    return (
        obj.get("kind") == owner.get("kind")
        and obj.get("apiVersion") == owner.get("apiVersion")
        and meta.get("name") == owner.get("name")
    )


def set_owner(objects: Iterable[Mapping[str, Any]], owner: Mapping[str, Any]) -> list[dict]:
    """Copies of `objects`, each owned by `owner` (except the owner itself and retained ones)."""
    ref = owner_reference(owner)
    out = []
    for obj in objects:
        new = copy.deepcopy(dict(obj))
        if not (is_same(new, owner) or is_retained(new)):
            new.setdefault("metadata", {})["ownerReferences"] = [dict(ref)]
        out.append(new)
    return out


def root_of(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The default root of a rendering: its first object (the ConfigMap), uid not yet known."""
    first = objects[0]
    return {
        "apiVersion": first["apiVersion"],
        "kind": first["kind"],
        "name": first["metadata"]["name"],
    }
